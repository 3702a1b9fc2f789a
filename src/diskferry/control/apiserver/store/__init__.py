"""The object store: SQLite tables, the watch feed, field selectors and patches."""
