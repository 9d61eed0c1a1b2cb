"""Entry script for ``spark-submit`` (which takes a file, not a module): absolute imports only,
so it runs from the ``--py-files`` zip. ``spark-submit ... spark_jobs/submit.py spark-route ...``"""

from placement_cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
