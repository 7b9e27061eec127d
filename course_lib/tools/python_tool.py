"""The restricted `python` tool: a whitelisted interpreter over Python's AST (chapters 00, 04, 06).

TORL and ARTIST let the policy run code. Running the policy's text with `exec` would hand a
sandbox escape to whatever RL discovers, so this tool parses the program with `ast` and walks the
tree itself. It allows arithmetic, comparisons, variables, `if`, `for` over `range`, lists,
`print`, and a few pure functions; it refuses imports, attributes, definitions, `while`, `exec`,
`eval`, `open` and everything else. Every run is limited in interpreter steps, wall time, the size
of numbers, strings and lists, and nesting depth. Errors come back as one line of text, as TORL
returns only the last line of a traceback.
"""

from __future__ import annotations

import ast
import math
import operator
import time
from dataclasses import dataclass


class ToolError(Exception):
    """A refused or failed program; its message is what the policy sees."""


@dataclass(frozen=True)
class Limits:
    max_source_chars: int = 2_000
    max_steps: int = 20_000
    max_seconds: float = 0.5
    max_int_digits: int = 60
    max_sequence_len: int = 10_000
    max_depth: int = 40
    max_output_chars: int = 2_000


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}  # fmt: skip
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}  # fmt: skip
_FUNCTIONS = {
    "abs": abs, "min": min, "max": max, "round": round, "int": int, "float": float, "len": len,
    "sum": sum, "sqrt": math.sqrt, "floor": math.floor, "ceil": math.ceil, "gcd": math.gcd,
    "log": math.log, "exp": math.exp,
}  # fmt: skip


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class Interpreter:
    """Evaluates one program under `limits`; create a new one per call."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.variables: dict[str, object] = {}
        self.output: list[str] = []
        self.steps = 0
        self.deadline = time.monotonic() + limits.max_seconds

    def run(self, source: str) -> str:
        if len(source) > self.limits.max_source_chars:
            raise ToolError(f"program longer than {self.limits.max_source_chars} characters")
        try:
            tree = ast.parse(source, mode="exec")
        except SyntaxError as err:
            raise ToolError(f"SyntaxError: {err.msg}") from None
        except ValueError:  # e.g. null bytes or lone surrogates in the source
            raise ToolError("SyntaxError: source is not valid text") from None
        last_value = None
        for index, statement in enumerate(tree.body):
            is_last_expr = index == len(tree.body) - 1 and isinstance(statement, ast.Expr)
            if is_last_expr:
                last_value = self.eval(statement.value, 0)
            else:
                self.exec_block([statement], 0)
        if last_value is not None and not self.output:
            self.output.append(self.format(last_value))
        text = "\n".join(self.output)
        if len(text) > self.limits.max_output_chars:
            raise ToolError("output too long")
        return text

    def tick(self, depth: int) -> None:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise ToolError(f"step limit of {self.limits.max_steps} exceeded")
        if depth > self.limits.max_depth:
            raise ToolError("expression nested too deeply")
        if self.steps % 256 == 0 and time.monotonic() > self.deadline:
            raise ToolError("time limit exceeded")

    def check(self, value: object) -> object:
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            # Cheap bound first (10**d < 2**(4d)), exact comparison only for numbers near the limit.
            digits = self.limits.max_int_digits
            if value.bit_length() > 4 * digits or abs(value) >= 10**digits:
                raise ToolError(f"integer larger than {digits} digits")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ToolError("result is not a finite number")
        elif isinstance(value, str | list):
            if len(value) > self.limits.max_sequence_len:
                raise ToolError("string or list too long")
            if isinstance(value, list):
                # Flat lists only: nested lists could alias one list many times over, and walking
                # the aliases would cost far more than the limits allow.
                for item in value:
                    if isinstance(item, list):
                        raise ToolError("nested lists are not allowed")
                    self.check(item)
        else:
            raise ToolError(f"values of type {type(value).__name__} are not allowed")
        return value

    @staticmethod
    def format(value: object) -> str:
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return str(value)

    def exec_block(self, statements: list[ast.stmt], depth: int) -> None:
        for statement in statements:
            self.tick(depth)
            self.exec_statement(statement, depth + 1)

    def exec_statement(self, node: ast.stmt, depth: int) -> None:
        if isinstance(node, ast.Expr):
            self.eval(node.value, depth)
        elif isinstance(node, ast.Assign):
            value = self.eval(node.value, depth)
            for target in node.targets:
                self.assign(target, value, depth)
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                raise ToolError("only names can be updated with augmented assignment")
            current = self.lookup(node.target.id)
            self.variables[node.target.id] = self.binary(node.op, current, self.eval(node.value, depth))
        elif isinstance(node, ast.If):
            branch = node.body if self.eval(node.test, depth) else node.orelse
            self.exec_block(branch, depth)
        elif isinstance(node, ast.For):
            self.exec_for(node, depth)
        elif isinstance(node, ast.Break):
            raise _Break
        elif isinstance(node, ast.Continue):
            raise _Continue
        elif isinstance(node, ast.Pass):
            return
        else:
            raise ToolError(f"statement {type(node).__name__} is not allowed")

    def exec_for(self, node: ast.For, depth: int) -> None:
        iterable = node.iter
        if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range"):
            raise ToolError("for loops may only iterate over range(...)")
        if iterable.keywords or not 1 <= len(iterable.args) <= 3:
            raise ToolError("range takes one to three positional arguments")
        bounds = [self.eval(arg, depth) for arg in iterable.args]
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            raise ToolError("range arguments must be integers")
        for value in range(*bounds):
            self.tick(depth)
            self.assign(node.target, value, depth)
            try:
                self.exec_block(node.body, depth)
            except _Break:
                return
            except _Continue:
                continue
        self.exec_block(node.orelse, depth)

    def assign(self, target: ast.expr, value: object, depth: int) -> None:
        if isinstance(target, ast.Name):
            self.variables[target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            if not isinstance(value, list | tuple) or len(value) != len(target.elts):
                raise ToolError("cannot unpack value into targets")
            for element, item in zip(target.elts, value, strict=True):
                self.assign(element, item, depth)
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value, depth)
            index = self.eval(target.slice, depth)
            if not isinstance(container, list) or not isinstance(index, int):
                raise ToolError("only list items can be assigned by integer index")
            if isinstance(value, list):
                raise ToolError("nested lists are not allowed")
            try:
                container[index] = value
            except IndexError:
                raise ToolError("IndexError: list index out of range") from None
        else:
            raise ToolError(f"cannot assign to {type(target).__name__}")

    def lookup(self, name: str) -> object:
        if name not in self.variables:
            raise ToolError(f"NameError: name '{name}' is not defined")
        return self.variables[name]

    def binary(self, op: ast.operator, left: object, right: object) -> object:
        kind = type(op)
        if kind not in _BINARY:
            raise ToolError(f"operator {kind.__name__} is not allowed")
        if kind is ast.Pow and isinstance(right, int | float) and abs(right) > 1_000:
            raise ToolError("exponent too large")
        if kind is ast.Mult and (isinstance(left, str | list) or isinstance(right, str | list)):
            sequence, count = (left, right) if isinstance(left, str | list) else (right, left)
            # Refuse before multiplying: the product would be allocated before any check.
            if isinstance(count, int) and len(sequence) * count > self.limits.max_sequence_len:
                raise ToolError("string or list too long")
        try:
            return self.check(_BINARY[kind](left, right))
        except ZeroDivisionError:
            raise ToolError("ZeroDivisionError: division by zero") from None
        except (TypeError, ValueError, OverflowError) as err:
            raise ToolError(f"{type(err).__name__}: {err}") from None

    def eval(self, node: ast.expr, depth: int) -> object:
        self.tick(depth)
        depth += 1
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, int | float | str | bool | type(None)):
                raise ToolError(f"constants of type {type(node.value).__name__} are not allowed")
            return self.check(node.value)
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.BinOp):
            return self.binary(node.op, self.eval(node.left, depth), self.eval(node.right, depth))
        if isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                raise ToolError(f"operator {type(node.op).__name__} is not allowed")
            try:
                return self.check(_UNARY[type(node.op)](self.eval(node.operand, depth)))
            except TypeError as err:
                raise ToolError(f"TypeError: {err}") from None
        if isinstance(node, ast.BoolOp):
            value = self.eval(node.values[0], depth)
            for operand in node.values[1:]:
                if isinstance(node.op, ast.And) and not value or isinstance(node.op, ast.Or) and value:
                    return value
                value = self.eval(operand, depth)
            return value
        if isinstance(node, ast.Compare):
            left = self.eval(node.left, depth)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                if type(op) not in _COMPARE:
                    raise ToolError(f"comparison {type(op).__name__} is not allowed")
                right = self.eval(comparator, depth)
                try:
                    if not _COMPARE[type(op)](left, right):
                        return False
                except TypeError as err:
                    raise ToolError(f"TypeError: {err}") from None
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self.eval(node.body if self.eval(node.test, depth) else node.orelse, depth)
        if isinstance(node, ast.List | ast.Tuple):
            return self.check([self.eval(element, depth) for element in node.elts])
        if isinstance(node, ast.Subscript):
            container = self.eval(node.value, depth)
            index = self.eval(node.slice, depth)
            if not isinstance(container, list | str) or not isinstance(index, int):
                raise ToolError("only lists and strings can be indexed, by an integer")
            try:
                return container[index]
            except IndexError:
                raise ToolError("IndexError: index out of range") from None
        if isinstance(node, ast.Call):
            return self.call(node, depth)
        raise ToolError(f"{type(node).__name__} is not allowed")

    def call(self, node: ast.Call, depth: int) -> object:
        if not isinstance(node.func, ast.Name):
            raise ToolError("only the built-in functions can be called")
        if node.keywords:
            raise ToolError("keyword arguments are not allowed")
        name = node.func.id
        args = [self.eval(arg, depth) for arg in node.args]
        if name == "print":
            self.output.append(" ".join(self.format(arg) for arg in args))
            if sum(len(line) for line in self.output) > self.limits.max_output_chars:
                raise ToolError("output too long")
            return None
        if name == "range":
            raise ToolError("range may only be used in a for loop")
        if name not in _FUNCTIONS:
            raise ToolError(f"NameError: function '{name}' is not available")
        try:
            if name == "sum" and not (len(args) == 1 and isinstance(args[0], list)):
                raise ToolError("sum takes one list of numbers")
            return self.check(_FUNCTIONS[name](*args))
        except (TypeError, ValueError, OverflowError, ZeroDivisionError) as err:
            raise ToolError(f"{type(err).__name__}: {err}") from None


def run_python(source: str, limits: Limits = Limits()) -> str:
    """Run `source` in the restricted interpreter; return its output or a one-line `error: ...`."""
    try:
        return Interpreter(limits).run(source)
    except ToolError as err:
        return f"error: {err}"
    except RecursionError:
        return "error: expression nested too deeply"
    except MemoryError:
        return "error: out of memory"
