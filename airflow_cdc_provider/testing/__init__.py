"""Helpers for tests and the demo: a throwaway MySQL-compatible server with a row binlog."""
