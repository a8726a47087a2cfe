"""Sources' records as Spark reads them: epoch tagging, parsing, Spark types, file-name hashes."""
