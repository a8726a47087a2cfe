"""Sources: the segment files a job reads, their record formats, and the id store.

- ``source``: the partitioned segment-file source, scanned and registered at inject;
- ``segment_reader``: one segment file read as a stream (lines, size, checksum, mtime);
- ``segment_changes``: registered segments checked against their files (``kinds``: which sources are files);
- ``delta_source``, ``kafka_source``: a Delta table's versions and Kafka's offsets as segments;
- ``record_formats``: what a job's records must look like (a record that does not fit is a dead letter);
- ``id_store``: exactly-once for sources whose records carry ids.
"""
