"""The features read back for training and scoring: ``features`` (the Parquet files of an extraction,
their vocabulary and checks) and ``batches`` (padded tensors, bucketing by length)."""
