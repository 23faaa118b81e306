"""What a name costs between Python and the JVM (shared.py4j_names.remember_jvm_names):
in-process, with a stand-in for Py4J's client that answers as the JVM does."""

from py4j import protocol as proto
from py4j.java_gateway import GatewayProperty, JavaClass, JavaMember, JavaPackage, JVMView, PythonProxyPool

from shared.py4j_names import remember_jvm_names


class Client:
    """Answers Py4J's lookups as the JVM does and counts the commands sent."""

    converters = ()

    def __init__(self, classes, fields=()):
        self.classes, self.fields, self.sent = set(classes), dict(fields), []
        self.gateway_property = GatewayProperty(False, PythonProxyPool())

    def send_command(self, command):
        self.sent.append(command)
        kind, rest = command.split("\n")[1], command.split("\n")[2:]
        if kind == "u":  # a name in a view or a package: a class, else a package
            return proto.SUCCESS_CLASS + rest[0] if rest[0] in self.classes else proto.SUCCESS_PACKAGE
        owner, name = rest[0], rest[1]  # a member of a class: a static field's value, else a method
        if (owner, name) in self.fields:
            return proto.SUCCESS + proto.INTEGER_TYPE + str(self.fields[owner, name])
        return proto.SUCCESS + proto.METHOD_TYPE


def test_a_class_and_its_static_method_are_asked_once_each():
    remember_jvm_names()
    client = Client({"PythonUtils"})
    jvm = JVMView(client, "default", id=proto.DEFAULT_JVM_ID)
    for _ in range(3):
        method = jvm.PythonUtils.toSeq
    assert isinstance(method, JavaMember)
    assert len(client.sent) == 2


def test_a_static_fields_value_and_a_package_are_asked_each_time():
    """A field's value may change; a name that is a package now may be a
    class once another package is imported."""
    remember_jvm_names()
    client = Client({"org.example.Counter"}, {("org.example.Counter", "total"): 7})
    jvm = JVMView(client, "default", id=proto.DEFAULT_JVM_ID)
    counter = getattr(jvm, "org.example.Counter")
    assert isinstance(counter, JavaClass)
    assert [counter.total, counter.total] == [7, 7]
    assert isinstance(jvm.org, JavaPackage) and isinstance(jvm.org, JavaPackage)
    assert len(client.sent) == 1 + 2 + 2
