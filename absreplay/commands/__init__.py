"""The `absreplay` command line: its commands, their tables and report, the demo, spark-submit."""
