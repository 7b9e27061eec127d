"""Pure functions, one file per method: tensors in, tensors out, each unit-tested by hand."""
