/*
 * A partition's leader, computed in the JVM: leaders is the placement's per-partition leader index
 * (int32, little-endian, one per partition, from PlacementTable.owner_indices on the driver), passed
 * as a binary literal so the plan holds one value instead of P array elements.
 * Registered as placement_partition_leader(partition, leaders) by spark_jobs/jvm.py; null in, null out.
 */
package placement.spark;

import org.apache.spark.sql.api.java.UDF2;

public final class PartitionLeader implements UDF2<Integer, byte[], Integer> {
    private static final long serialVersionUID = 1L;

    @Override
    public Integer call(Integer partition, byte[] leaders) {
        if (partition == null) {
            return null;
        }
        int p = partition.intValue() << 2;
        return (leaders[p] & 0xff) | (leaders[p + 1] & 0xff) << 8 | (leaders[p + 2] & 0xff) << 16 | leaders[p + 3] << 24;
    }
}
