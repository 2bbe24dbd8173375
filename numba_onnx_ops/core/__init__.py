"""Rules both operators share: type constraints by version, dtypes, broadcasting, checks."""
