"""Wire-level fakes of messenger APIs, for tests."""
