"""Path converters of the telemetry's pages and API: a node's name and a job id are held to their
patterns in the route itself, so anything else is a 404 before a view or a query sees it."""

from django.urls import register_converter

from .queries import JOB_PATTERN, NODE_PATTERN


class NodeNameConverter:
    regex = NODE_PATTERN

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value) -> str:
        return str(value)


class JobConverter(NodeNameConverter):
    regex = JOB_PATTERN


register_converter(NodeNameConverter, "telemetry_node")
register_converter(JobConverter, "telemetry_job")
