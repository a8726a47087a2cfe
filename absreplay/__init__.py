"""ABS Replay: the command line and its configuration."""
