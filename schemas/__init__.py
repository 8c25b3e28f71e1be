"""pandera DataFrameModels, one per table crossing a stage boundary; answer / ground-truth JSON schemas."""
