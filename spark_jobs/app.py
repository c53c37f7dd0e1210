"""spark-submit entry point of the reconciliation job; same flags as `waitline reconcile`.

    spark-submit --jars <connector jars> --py-files waitline-*.whl spark_jobs/app.py --group G

See docs/RECONCILE.md for a real cluster.
"""

from spark_jobs.cli import main

if __name__ == "__main__":
    main()
