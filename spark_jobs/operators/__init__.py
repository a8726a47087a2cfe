"""The dataflow of a declared job, one epoch at a time, and its keyed operators on DataFrames."""
