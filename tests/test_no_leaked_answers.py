"""No reference answer reaches a learner: not through the package, not through a chapter.

The answers live in ``solutions/`` (between ``### BEGIN SOLUTION`` and ``### END SOLUTION``), and the tests keep a
copy of the puzzles' kernels (tests/puzzle_solutions.py). This file fails if

* ``npu_lab.puzzles.solutions`` (the old home of the puzzle answers) can be imported again;
* any function under ``npu_lab/`` - in a module's code or in a string of code - has the body of a puzzle answer,
  whatever its name (the bodies are compared as syntax trees, with every name renamed in order of appearance, so
  a copy with other variable names is found too);
* any public function under ``npu_lab/`` has the body of an answer a check grades, from any solution notebook (a
  grader keeps its reference private, with a leading ``_``, and a chapter never calls it);
* a chapter notebook imports or calls a module of answers (the tests' copy, a solution notebook, a grader's
  private ``_`` helper), or defines a function with the body of a puzzle answer (no chapter runs one).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "npu_lab"
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
SOLUTION_NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb"))

#: Answers shorter than this (syntax-tree nodes of the body) are too generic to tell a copy from a coincidence
#: (``return torch.softmax(x, dim=1)``); the puzzle kernels are compared whatever their size.
MIN_NODES = 40


class _Canonical(ast.NodeTransformer):
    """Every name (variables, arguments, functions called) renamed ``v0, v1...`` in order of first appearance."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802 - ast's visitor names
        return ast.copy_location(ast.Name(self._name(node.id), ast.Load()), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(self._name(node.arg)), node)


def _body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return body


def fingerprint(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The function's arguments and body (docstring left out) as a syntax tree with canonical names."""
    node = ast.Module(body=_body(fn), type_ignores=[])
    canon = _Canonical()
    for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
        canon._name(a.arg)
    return ast.dump(canon.visit(ast.parse(ast.unparse(node))), annotate_fields=False)


def size(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return sum(1 for stmt in _body(fn) for _ in ast.walk(stmt))


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


Function = ast.FunctionDef | ast.AsyncFunctionDef


def qualified(tree: ast.AST, outer: tuple[str, ...] = ()) -> Iterator[tuple[str, Function]]:
    """Every function of ``tree`` with its qualified name (``make.inner``, ``Class.method``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield ".".join((*outer, node.name)), node
            yield from qualified(node, (*outer, node.name))
        elif isinstance(node, ast.ClassDef):
            yield from qualified(node, (*outer, node.name))
        else:
            yield from qualified(node, outer)


def public(qualname: str) -> bool:
    """Reachable under a public name: no part of the qualified name is private (a function nested in a private
    helper, such as a grader's ``_pair().bw``, is not)."""
    return not any(part.startswith("_") for part in qualname.split("."))


def _code(source: str) -> str:
    """A notebook cell's Python: IPython magics and shell lines commented out."""
    return "\n".join("# " + line if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _parse(source: str) -> ast.AST | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _strings_of_code(tree: ast.AST) -> Iterator[ast.AST]:
    """Code kept in string constants (a module could hold an answer as text to ``exec``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "def " in node.value:
            inner = _parse(node.value)
            if inner is not None:
                yield inner


def solution_answers(path: Path) -> dict[str, tuple[str, int]]:
    """The functions a solution notebook's answer cells define (helpers included): name -> (fingerprint, size)."""
    out = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or "### BEGIN SOLUTION" not in cell.source:
            continue
        source = "\n".join(line for line in _code(cell.source).splitlines() if "### " not in line)
        tree = _parse(source)
        assert tree is not None, f"{path.name}: an answer cell does not parse"
        for fn in functions(tree):
            out[fn.name] = (fingerprint(fn), size(fn))
    return out


def _puzzle_answers() -> dict[str, str]:
    tree = ast.parse((ROOT / "tests" / "puzzle_solutions.py").read_text())
    return {fn.name: fingerprint(fn) for fn in tree.body if isinstance(fn, ast.FunctionDef)}


def _puzzle_sizes() -> set[int]:
    tree = ast.parse((ROOT / "tests" / "puzzle_solutions.py").read_text())
    return {size(fn) for fn in tree.body if isinstance(fn, ast.FunctionDef)}


def _graded_names() -> set[str]:
    from npu_lab.grading import EXERCISES, load_all

    load_all()
    return {name for ex in EXERCISES.values() for name in ex.names}


PUZZLE_ANSWERS = _puzzle_answers()
PUZZLE_SIZES = _puzzle_sizes()
#: The answers the checks grade, by name (a helper an answer cell also defines, such as a dimension wrapper, is
#: the learner's too, but it is no answer: the package may have its own).
GRADED = {(path.name, name): answer for path in SOLUTION_NOTEBOOKS
          for name, answer in solution_answers(path).items() if name in _graded_names()}


@functools.cache
def _package_functions() -> tuple[tuple[str, str, ast.FunctionDef | ast.AsyncFunctionDef, int], ...]:
    """Every function under npu_lab/, in its code or in strings of code: (where, qualified name, function, size)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = str(path.relative_to(ROOT))
        out += [(where, name, fn, size(fn)) for name, fn in qualified(tree)]
        for inner in _strings_of_code(tree):
            out += [(f"{where} (in a string)", name, fn, size(fn)) for name, fn in qualified(inner)]
    return tuple(out)


def test_the_puzzle_answers_are_found_in_the_solution_notebook_and_the_tests_copy():
    """The fingerprints are those of the real answers (else the scans below would find nothing)."""
    assert len(PUZZLE_ANSWERS) == 14
    p1 = solution_answers(ROOT / "solutions" / "P1_npu_puzzles.ipynb")
    assert {name: fp for name, (fp, _) in p1.items()} == PUZZLE_ANSWERS
    renamed = ast.parse("def f(c, xs, o, size, block):\n"
                        "    i = c.program_id(0) * block + c.arange(block)\n"
                        "    c.store(o, i, c.load(xs, i) + 10.0)\n").body[0]
    assert fingerprint(renamed) == PUZZLE_ANSWERS["map_kernel"]  # another spelling of the same answer is found


def test_the_old_home_of_the_puzzle_answers_cannot_be_imported():
    assert importlib.util.find_spec("npu_lab.puzzles.solutions") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("npu_lab.puzzles.solutions")
    import npu_lab.puzzles

    assert not hasattr(npu_lab.puzzles, "solutions") and not hasattr(npu_lab.puzzles, "SOLUTIONS")


def test_no_function_under_npu_lab_has_the_body_of_a_puzzle_answer():
    answers = {fp: name for name, fp in PUZZLE_ANSWERS.items()}
    sizes = _puzzle_sizes()  # a renamed copy has the same size: only functions of an answer's size are compared
    found = [f"{where}: {name} (line {fn.lineno}) is {answers[fp]}" for where, name, fn, n in _package_functions()
             if n in sizes and (fp := fingerprint(fn)) in answers]
    assert not found, "puzzle answers in the package:\n" + "\n".join(found)


def test_no_public_function_under_npu_lab_has_the_body_of_an_answer():
    answers = {fp: f"{nb}: {name}" for (nb, name), (fp, n) in GRADED.items() if n >= MIN_NODES}
    sizes = {n for (_, n) in GRADED.values()}
    assert len(answers) > 30
    found = [f"{where}: {name} (line {fn.lineno}) is the answer {answers[fp]}"
             for where, name, fn, n in _package_functions()
             if n in sizes and public(name) and (fp := fingerprint(fn)) in answers]
    assert not found, "answers under a public name in the package:\n" + "\n".join(found)


#: What a chapter must not import or read: the tests' copy of the puzzle answers, the solution notebooks.
_ANSWER_MODULE = re.compile(r"(^|\.)(puzzle_solutions|solutions)($|\.)")
_ANSWER_PATH = re.compile(r"(^|[/\\'\"])(solutions/|puzzle_solutions)")


def chapter_problems(source: str) -> list[str]:
    """What a chapter cell does with reference answers: imports, reads, private grader helpers, copied answers."""
    problems = []
    tree = _parse(_code(source))
    if tree is None:
        return ["the cell does not parse"]
    for line in source.splitlines():
        if line.lstrip().startswith(("%", "!")) and _ANSWER_PATH.search(line):
            problems.append(f"runs {line.strip()!r}")
    grader_modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ANSWER_MODULE.search(alias.name):
                    problems.append(f"imports {alias.name}")
                if alias.name.startswith("npu_lab.exercises"):
                    grader_modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if _ANSWER_MODULE.search(module) or any(_ANSWER_MODULE.search(f"{module}.{a.name}") for a in node.names):
                problems.append(f"imports from {module}")
            if module.startswith("npu_lab.exercises") or module == "npu_lab" and \
                    any(a.name == "exercises" for a in node.names):
                for alias in node.names:
                    if alias.name.startswith("_"):
                        problems.append(f"imports the grader's private {module}.{alias.name}")
                    grader_modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _ANSWER_PATH.search(node.value):
            problems.append(f"names {node.value!r}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = ast.unparse(node.value)
            if base.split(".")[0] in grader_modules or ".exercises" in f".{base}":
                problems.append(f"uses the grader's private {base}.{node.attr}")
    puzzle = {fp: name for name, fp in PUZZLE_ANSWERS.items()}
    for fn in functions(tree):
        if size(fn) in PUZZLE_SIZES and (fp := fingerprint(fn)) in puzzle:
            problems.append(f"defines {fn.name}, which is the puzzle answer {puzzle[fp]}")
    return problems


def test_the_chapter_scan_finds_each_way_of_reaching_an_answer():
    assert chapter_problems("from tests.puzzle_solutions import map_kernel")
    assert chapter_problems("import tests.puzzle_solutions as s")
    assert chapter_problems("from npu_lab.puzzles import solutions")
    assert chapter_problems("%run ../solutions/C3_torchfx.ipynb")
    assert chapter_problems("import nbformat\nnb = nbformat.read('../solutions/P1_npu_puzzles.ipynb', 4)")
    assert chapter_problems("from npu_lab.exercises.ch3 import _reference_pass")
    assert chapter_problems("from npu_lab.exercises import ch6\nch6._expected(1)")
    assert chapter_problems("import npu_lab.exercises.ch4\nnpu_lab.exercises.ch4._loop()")
    assert chapter_problems("def k(ctx, a, o, n, B):\n    p = ctx.program_id(0) * B + ctx.arange(B)\n"
                            "    ctx.store(o, p, ctx.load(a, p) + 10.0)\n")
    assert not chapter_problems("from npu_lab.exercises.ch4 import eager_loop\nimport npu_lab\nx = npu_lab.__name__")
    assert not chapter_problems("print('the solutions are in a folder of their own')")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_chapter_reaches_a_reference_answer(path):
    problems = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code":
            problems += [f"cell {cell.get('id')}: {p}" for p in chapter_problems(cell.source)]
    assert not problems, f"{path.name}:\n" + "\n".join(problems)



def test_a_function_is_public_only_if_every_enclosing_name_is():
    tree = ast.parse("class Pass:\n    def run(self):\n        pass\n\n\n"
                     "def _pair():\n    def bw(gm):\n        return gm\n    return bw\n\n\n"
                     "def make():\n    def fw(gm):\n        return gm\n    return fw\n")
    names = [name for name, _ in qualified(tree)]
    assert names == ["Pass.run", "_pair", "_pair.bw", "make", "make.fw"]
    assert [public(n) for n in names] == [True, False, False, True, True]
