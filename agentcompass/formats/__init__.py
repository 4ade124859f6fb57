"""Task formats: turn a data source into tasks and grade a finished sandbox."""
