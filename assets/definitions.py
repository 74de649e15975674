"""The one place the code location is assembled."""

from dagster import Definitions

from resources.spark import SparkResource

defs = Definitions(
    resources={"spark": SparkResource()},
)
