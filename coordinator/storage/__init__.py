"""Files wherever a job keeps them: a local path, an object store (``s3a://``) or HDFS (``hdfs://``).

One layer for the coordinator and the executors' Python alike: pyarrow's filesystems
(``filesystems.filesystem``), configured from the Hadoop properties Spark itself reads
(``hadoop_conf``), and a small path type over them for the sources (``location.Location``).
"""
