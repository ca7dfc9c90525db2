"""What a check says: one line per case, rendered as text and as HTML in Jupyter.

A :class:`CheckResult` holds the cases of one exercise. Public cases show their
input, the expected value and yours; hidden cases show only that they failed
and their hint, never their data. The verdict "public and hidden checks
passed" is given only when every case of both kinds passed.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

PASSED = "passed"
NOT_YET = "not yet"
NOT_STARTED = "not started"


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

    def lines(self) -> list[str]:
        mark = "ok  " if self.passed else "FAIL"
        if self.hidden:
            out = [f"{mark} hidden case"]
            if not self.passed and self.hint:
                out.append(f"     hint: {self.hint}")
            return out
        out = [f"{mark} {self.description}"]
        if not self.passed:
            if self.error:
                out += ["     " + line for line in self.error.rstrip().splitlines()]
            else:
                if self.expected:
                    out.append(f"     expected: {self.expected}")
                if self.got:
                    out.append(f"     yours:    {self.got}")
            if self.hint:
                out.append(f"     hint: {self.hint}")
        return out


@dataclass
class CheckResult:
    """The outcome of grading one exercise."""

    exercise_id: str
    title: str
    cases: list[CaseResult] = field(default_factory=list)
    status: str = NOT_YET
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def public(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.hidden]

    @property
    def hidden(self) -> list[CaseResult]:
        return [c for c in self.cases if c.hidden]

    def verdict(self) -> str:
        if self.status == NOT_STARTED:
            return self.message or "not started yet"
        pub_ok = all(c.passed for c in self.public)
        hid_ok = all(c.passed for c in self.hidden)
        n_pub = sum(c.passed for c in self.public)
        n_hid = sum(c.passed for c in self.hidden)
        if pub_ok and hid_ok:
            return "public and hidden checks passed" if self.hidden else "all checks passed"
        parts = [f"{n_pub}/{len(self.public)} public checks passed"]
        if self.hidden:
            parts.append(f"{n_hid}/{len(self.hidden)} hidden checks passed")
        return ", ".join(parts)

    def __str__(self) -> str:
        head = f"[{self.status}] {self.exercise_id}: {self.title} - {self.verdict()}"
        lines = [head]
        if self.message and self.status != NOT_STARTED:
            lines.append("  " + self.message)
        if self.status != NOT_STARTED:
            for case in self.cases:
                lines += ["  " + line for line in case.lines()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {PASSED: "#1a7f37", NOT_YET: "#b35900", NOT_STARTED: "#57606a"}[self.status]
        icon = {PASSED: "&#10004;", NOT_YET: "&#10008;", NOT_STARTED: "&#9675;"}[self.status]
        out = [f'<div style="border-left:4px solid {colour};padding:4px 10px;margin:4px 0">',
               f'<b style="color:{colour}">{icon} {html.escape(self.status)}</b> '
               f"<code>{html.escape(self.exercise_id)}</code> {html.escape(self.title)}"
               f" &mdash; {html.escape(self.verdict())}"]
        if self.message and self.status != NOT_STARTED:
            out.append(f"<div>{html.escape(self.message)}</div>")
        if self.status != NOT_STARTED and self.cases:
            out.append('<table style="font-size:90%"><tr><th></th><th>case</th><th>expected</th>'
                       "<th>yours</th><th>hint</th></tr>")
            for c in self.cases:
                mark = "&#10004;" if c.passed else "&#10008;"
                if c.hidden:
                    hint = "" if c.passed else html.escape(c.hint)
                    out.append(f"<tr><td>{mark}</td><td><i>hidden case</i></td><td></td><td></td><td>{hint}</td></tr>")
                    continue
                got = f"<pre>{html.escape(c.error)}</pre>" if c.error else f"<code>{html.escape(c.got)}</code>"
                show = not c.passed
                out.append(
                    f"<tr><td>{mark}</td><td><code>{html.escape(c.description)}</code></td>"
                    f"<td><code>{html.escape(c.expected) if show else ''}</code></td>"
                    f"<td>{got if show else ''}</td><td>{html.escape(c.hint) if show else ''}</td></tr>")
            out.append("</table>")
        out.append("</div>")
        return "".join(out)


@dataclass
class Summary:
    """Several check results, as ``npu_lab.check()`` without an id returns them."""

    results: list[CheckResult]

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def counts(self) -> dict[str, int]:
        out = {PASSED: 0, NOT_YET: 0, NOT_STARTED: 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def __str__(self) -> str:
        if not self.results:
            return "No exercise answers found in this notebook yet."
        c = self.counts()
        head = f"{c[PASSED]} passed, {c[NOT_YET]} not yet, {c[NOT_STARTED]} not started"
        return "\n".join([head] + [str(r) for r in self.results])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.results:
            return "<p>No exercise answers found in this notebook yet.</p>"
        c = self.counts()
        head = f"<p><b>{c[PASSED]} passed</b>, {c[NOT_YET]} not yet, {c[NOT_STARTED]} not started</p>"
        return head + "".join(r._repr_html_() for r in self.results)
