"""The lab's exercises, one module per chapter, each exercise next to its check.

Modules here are imported by :func:`npu_lab.grading.load_all`; each declares its
chapter with :func:`npu_lab.grading.chapter` and its exercises with
:func:`npu_lab.grading.exercise`.
"""
