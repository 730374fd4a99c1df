"""SQLAlchemy persistence: runs and results, raters, study items and votes, jobs."""
