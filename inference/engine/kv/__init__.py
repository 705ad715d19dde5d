"""The KV caches a batch keeps, in a layout the engine owns: rows left-padded to one
index, plain or quantized, their masks, and the merge of single-sequence caches."""
