"""S3-compatible object storage: clients, URIs and a local SeaweedFS server for tests and the demo."""
