/*
 * The partition of a key, computed in the JVM: MurmurHash3_x86_32(UTF-8 bytes of the key, seed),
 * unsigned, mod partitions - exactly placement.hashing.key_hash(key, seed) % partitions.
 *
 * (Spark's built-in hash() is also Murmur3_x86_32, but seeded with 42 and with non-standard tail
 * handling, so it is not this spec.) Built by spark_jobs/jvm.py (javac, at build or first use),
 * registered with spark.udf.registerJavaFunction as placement_key_partition(utf8 bytes, seed, partitions);
 * tests/test_spark_jvm.py checks it against the Python spec through Spark.
 */
package placement.spark;

import org.apache.spark.sql.api.java.UDF3;

public final class KeyPartition implements UDF3<byte[], Long, Integer, Integer> {
    private static final long serialVersionUID = 1L;

    /** key: the UTF-8 bytes of the key (call it on CAST(key AS BINARY): no UTF-16 round trip). */
    @Override
    public Integer call(byte[] key, Long seed, Integer partitions) {
        if (key == null) {
            return null;
        }
        long h = murmur3x86_32(key, (int) seed.longValue()) & 0xFFFFFFFFL;
        return (int) (h % partitions.intValue());
    }

    /** Reference MurmurHash3_x86_32 (Appleby, public domain) over data, as a signed int. */
    public static int murmur3x86_32(byte[] data, int seed) {
        final int c1 = 0xcc9e2d51;
        final int c2 = 0x1b873593;
        int len = data.length;
        int h = seed;
        int blocks = len >>> 2;
        for (int i = 0; i < blocks; i++) {
            int p = i << 2;
            int k = (data[p] & 0xff) | (data[p + 1] & 0xff) << 8 | (data[p + 2] & 0xff) << 16 | (data[p + 3] & 0xff) << 24;
            k *= c1;
            k = Integer.rotateLeft(k, 15);
            k *= c2;
            h ^= k;
            h = Integer.rotateLeft(h, 13);
            h = h * 5 + 0xe6546b64;
        }
        int tail = blocks << 2;
        int k = 0;
        switch (len & 3) {
            case 3:
                k ^= (data[tail + 2] & 0xff) << 16;
                // fall through
            case 2:
                k ^= (data[tail + 1] & 0xff) << 8;
                // fall through
            case 1:
                k ^= data[tail] & 0xff;
                k *= c1;
                k = Integer.rotateLeft(k, 15);
                k *= c2;
                h ^= k;
                break;
            default:
                break;
        }
        h ^= len;
        h ^= h >>> 16;
        h *= 0x85ebca6b;
        h ^= h >>> 13;
        h *= 0xc2b2ae35;
        h ^= h >>> 16;
        return h;
    }
}
