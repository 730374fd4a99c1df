"""Evaluation: pure metrics, the suite runner, typed results, paper-style reports and figures."""
