"""Experiments the lessons run on the pretrained model, one module per topic.

Each module holds only code a lesson (or several) reuses; the lessons themselves show the
computations they teach inline.
"""
