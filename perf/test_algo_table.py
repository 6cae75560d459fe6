#!/usr/bin/python3
"""perf/algo_table.py keeps the hand-written analysis of docs/ALGORITHMS.md when it rewrites
the tables (it once dropped it when the kept text still carried its marker line)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import algo_table  # noqa: E402

fresh = "# tables, new\n\n## What wins where\n\n<!-- analysis -->\n"
kept = "\n<!-- analysis -->\n\nHand-written text.\n\n## Another section\n\nMore.\n"
out = algo_table.keep_analysis(fresh, "# tables, old\n\n## What wins where\n" + kept)
expected = "# tables, new\n\n## What wins where\n" + kept
assert out == expected, repr(out)
# Kept without a marker: the same text, no marker added.
out = algo_table.keep_analysis(fresh, "old\n## What wins where\n\nText only.\n")
assert out == "# tables, new\n\n## What wins where\n\nText only.\n", repr(out)
# Nothing written yet (only the marker), or no such section: the fresh document as it is.
for old in ["old\n## What wins where\n\n<!-- analysis -->\n", "no section\n"]:
    assert algo_table.keep_analysis(fresh, old) == fresh, old
# The committed document round-trips: regenerating its own tables keeps all of its analysis.
doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "ALGORITHMS.md")).read()
head = doc[:doc.index("## What wins where")]
assert algo_table.keep_analysis(head + fresh[fresh.index("## What"):], doc) == doc
print("ok")
