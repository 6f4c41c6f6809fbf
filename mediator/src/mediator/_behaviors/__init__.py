"""The built-in behaviors, one module or folder each; siblings never import each other.

What two of them share (the replay flag, record fields, the unit of work and
its participants) lives in `mediator._core`.
"""
