"""The object store: SQLite tables, the watch feed, selectors and patches."""
