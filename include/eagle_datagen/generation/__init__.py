"""Generation runs: shard plans, checkpoints, and the run stage that ties sourcing to SGLang."""
