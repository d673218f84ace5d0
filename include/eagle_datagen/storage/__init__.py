"""Where outputs go: a local folder or an s3:// prefix, with the contract layout under it."""
