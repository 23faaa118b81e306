"""Py4J's names, each looked up in the JVM once per process."""

from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView


def remember_jvm_names() -> None:
    """Py4J asks the JVM anew each time Python names a class or a static
    method (`jvm.PythonUtils.toSeq`: two calls before the call itself), and
    the JVM tries a short name as a class in each package PySpark imports,
    each miss a search of every jar on the class path. PySpark names some for
    each Column and DataFrame function, that is for each micro-batch's plan.
    A class or method a name stands for does not change while the JVM runs:
    each is asked once per process (py4j/py4j#596 does the same, unreleased).
    A package is asked again, as a later import may make its name a class."""
    for kind in (JVMView, JavaPackage, JavaClass):
        if not getattr(kind.__getattr__, "remembers", False):
            kind.__getattr__ = _remembering(kind.__getattr__)


def _remembering(look_up: Any) -> Any:
    def __getattr__(self: Any, name: str) -> Any:
        known = self.__dict__.setdefault("_known_names", {})
        if name in known:
            return known[name]
        value = look_up(self, name)
        if isinstance(value, (JavaClass, JavaMember)):  # not a package, nor a static field's value
            known[name] = value
        return value
    __getattr__.remembers = True  # type: ignore[attr-defined]
    return __getattr__
