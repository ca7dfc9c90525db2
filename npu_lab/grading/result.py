"""What a check says: one line per case, rendered as text and as HTML in Jupyter.

A :class:`CheckResult` holds the cases of one exercise. Public cases show their
input, the expected value and yours; hidden cases show only that they failed
and their hint, never their data. The verdict "public and hidden checks
passed" is given only when every case of both kinds passed.

Failing cases come first, each with its details; the passing ones are
collapsed into a count (the HTML view lists the public ones on request). What
the learner's code printed during a failing public case is shown, capped.
Rendering never fails: every field is plain text made when the case ran.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

PASSED = "passed"
NOT_YET = "not yet"
NOT_STARTED = "not started"

#: Characters of a case's printed output shown in the results (the capture keeps a little more).
SHOWN_OUTPUT = 600
#: Failing cases shown in full; more are counted.
SHOWN_FAILURES = 12


def _text(value: object) -> str:
    return value if type(value) is str else ""


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit:,} more characters)"


@dataclass
class CaseResult:
    """One case of a check."""

    description: str
    passed: bool
    expected: str = ""
    got: str = ""
    hint: str = ""
    hidden: bool = False
    error: str = ""  # the learner's exception, trimmed to their own frames
    output: str = ""  # what the learner's code printed during the case (capped)

    def lines(self) -> list[str]:
        mark = "ok  " if self.passed else "FAIL"
        if self.hidden:
            out = [f"{mark} hidden case"]
            if not self.passed and self.hint:
                out.append(f"     hint: {_text(self.hint)}")
            return out
        out = [f"{mark} {_text(self.description)}"]
        if not self.passed:
            if self.error:
                out += ["     " + line for line in _text(self.error).rstrip().splitlines()]
            else:
                if self.expected:
                    out.append(f"     expected: {_text(self.expected)}")
                if self.got:
                    out.append(f"     yours:    {_text(self.got)}")
            if self.output:
                printed = _cap(_text(self.output).rstrip(), SHOWN_OUTPUT).splitlines()
                out += ["     your code printed:"] + ["       " + line for line in printed]
            if self.hint:
                out.append(f"     hint: {_text(self.hint)}")
        return out


@dataclass
class CheckResult:
    """The outcome of grading one exercise."""

    exercise_id: str
    title: str
    cases: list[CaseResult] = field(default_factory=list)
    status: str = NOT_YET
    message: str = ""
    notes: list[str] = field(default_factory=list)  # e.g. global state the check put back

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def public(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.hidden]

    @property
    def hidden(self) -> list[CaseResult]:
        return [c for c in self.cases if c.hidden]

    @property
    def failing(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    @property
    def passing(self) -> list[CaseResult]:
        return [c for c in self.cases if c.passed]

    def verdict(self) -> str:
        if self.status == NOT_STARTED:
            return self.message or "not started yet"
        pub_ok = all(c.passed for c in self.public)
        hid_ok = all(c.passed for c in self.hidden)
        n_pub = sum(c.passed for c in self.public)
        n_hid = sum(c.passed for c in self.hidden)
        if pub_ok and hid_ok and self.status == PASSED:
            return "public and hidden checks passed" if self.hidden else "all checks passed"
        parts = [f"{n_pub}/{len(self.public)} public checks passed"]
        if self.hidden:
            parts.append(f"{n_hid}/{len(self.hidden)} hidden checks passed")
        return ", ".join(parts)

    def _passing_summary(self) -> str:
        ok = self.passing
        if not ok:
            return ""
        pub = sum(1 for c in ok if not c.hidden)
        hid = len(ok) - pub
        kinds = ", ".join(p for p in (f"{pub} public" if pub else "", f"{hid} hidden" if hid else "") if p)
        return f"ok   {len(ok)} other case{'s' if len(ok) != 1 else ''} passed ({kinds})" if self.failing \
            else f"ok   all {len(ok)} cases passed ({kinds})"

    def __str__(self) -> str:
        head = f"[{self.status}] {self.exercise_id}: {self.title} - {self.verdict()}"
        lines = [head]
        if self.message and self.status != NOT_STARTED:
            lines.append("  " + _text(self.message))
        lines += ["  note: " + _text(n) for n in self.notes]
        if self.status != NOT_STARTED:
            failing = self.failing
            for case in failing[:SHOWN_FAILURES]:
                lines += ["  " + line for line in case.lines()]
            if len(failing) > SHOWN_FAILURES:
                more = len(failing) - SHOWN_FAILURES
                lines.append(f"  FAIL and {more} more failing cases (fix the ones above first)")
            summary = self._passing_summary()
            if summary:
                lines.append("  " + summary)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        e = html.escape
        colour = {PASSED: "#1a7f37", NOT_YET: "#b35900", NOT_STARTED: "#57606a"}.get(self.status, "#b35900")
        icon = {PASSED: "&#10004;", NOT_YET: "&#10008;", NOT_STARTED: "&#9675;"}.get(self.status, "&#10008;")
        out = [f'<div style="border-left:4px solid {colour};padding:4px 10px;margin:4px 0">',
               f'<b style="color:{colour}">{icon} {e(self.status)}</b> '
               f"<code>{e(self.exercise_id)}</code> {e(self.title)}"
               f" &mdash; {e(self.verdict())}"]
        if self.message and self.status != NOT_STARTED:
            out.append(f"<div>{e(_text(self.message))}</div>")
        for n in self.notes:
            out.append(f"<div><i>note:</i> {e(_text(n))}</div>")
        if self.status != NOT_STARTED and self.cases:
            failing = self.failing
            if failing:
                out.append('<table style="font-size:90%"><tr><th></th><th>case</th><th>expected</th>'
                           "<th>yours</th><th>hint</th></tr>")
                for c in failing[:SHOWN_FAILURES]:
                    if c.hidden:
                        out.append(f"<tr><td>&#10008;</td><td><i>hidden case</i></td><td></td><td></td>"
                                   f"<td>{e(_text(c.hint))}</td></tr>")
                        continue
                    got = f"<pre>{e(_text(c.error))}</pre>" if c.error else f"<code>{e(_text(c.got))}</code>"
                    if c.output:
                        got += (f"<div>your code printed:</div><pre>"
                                f"{e(_cap(_text(c.output).rstrip(), SHOWN_OUTPUT))}</pre>")
                    out.append(f"<tr><td>&#10008;</td><td><code>{e(_text(c.description))}</code></td>"
                               f"<td><code>{e(_text(c.expected))}</code></td><td>{got}</td>"
                               f"<td>{e(_text(c.hint))}</td></tr>")
                if len(failing) > SHOWN_FAILURES:
                    out.append(f"<tr><td></td><td colspan=4>and {len(failing) - SHOWN_FAILURES} more failing "
                               "cases (fix the ones above first)</td></tr>")
                out.append("</table>")
            summary = self._passing_summary()
            if summary:
                public = [c for c in self.passing if not c.hidden]
                items = "".join(f"<li><code>{e(_text(c.description))}</code></li>" for c in public)
                listing = f"<ul>{items}</ul>" if items else ""
                out.append(f'<details><summary>&#10004; {e(summary[5:])}</summary>{listing}</details>')
        out.append("</div>")
        return "".join(out)


@dataclass
class Summary:
    """Several check results, as ``npu_lab.check()`` without an id returns them (failures first)."""

    results: list[CheckResult]

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def counts(self) -> dict[str, int]:
        out = {PASSED: 0, NOT_YET: 0, NOT_STARTED: 0}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def _ordered(self) -> list[CheckResult]:
        rank = {NOT_YET: 0, NOT_STARTED: 1, PASSED: 2}
        return sorted(self.results, key=lambda r: rank.get(r.status, 0))

    def __str__(self) -> str:
        if not self.results:
            return "No exercise answers found in this notebook yet."
        c = self.counts()
        head = f"{c[PASSED]} passed, {c[NOT_YET]} not yet, {c[NOT_STARTED]} not started"
        lines = [head]
        for r in self._ordered():
            lines.append(str(r) if not r.passed else f"[{r.status}] {r.exercise_id}: {r.title} - {r.verdict()}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.results:
            return "<p>No exercise answers found in this notebook yet.</p>"
        c = self.counts()
        head = f"<p><b>{c[PASSED]} passed</b>, {c[NOT_YET]} not yet, {c[NOT_STARTED]} not started</p>"
        return head + "".join(r._repr_html_() for r in self._ordered())
