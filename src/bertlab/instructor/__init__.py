"""Instructors' tools for a class run with nbgrader: ``bertlab autograde`` grades every collected
submission in parallel and records the results in nbgrader's gradebook."""
