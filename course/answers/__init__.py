"""The course's answers beyond an exercise's signature: code the course runs that computes what an
exercise asks, generalised (chapter 5's blockwise attention over batches of heads, causal too).
Instructor-only, like ``solutions/``: the learners' copy leaves this folder out, and shipped code
reaches it through ``course.withheld.module`` (its recorded calls, in the learners' copy).
Each builds on the chapter's solution cells (``course.withheld.answers``) where it can."""
