"""The second finding: --policy-report's text and code, and the candidate fix (fix_candidate/)."""
