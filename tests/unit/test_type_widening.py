"""Which column types a landed value fits without loss when a table's column was widened (``delta.evolution.widens``),
as Delta's type widening allows them."""

import pytest

from rocketlake.delta.evolution import widens


@pytest.mark.parametrize(
    "narrow, wide",
    [
        ("tinyint", "smallint"),
        ("smallint", "bigint"),
        ("int", "bigint"),
        ("float", "double"),
        ("int", "double"),
        ("int", "decimal(10,0)"),
        ("bigint", "decimal(22,2)"),
        ("decimal(10,2)", "decimal(12,4)"),
        ("date", "timestamp_ntz"),
    ],
)
def test_a_widening_delta_allows_fits(narrow, wide):
    assert widens(narrow, wide)


@pytest.mark.parametrize(
    "narrow, wide",
    [
        ("bigint", "int"),  # narrower: the value may not fit
        ("double", "float"),
        ("bigint", "double"),  # a long loses digits in a double
        ("int", "decimal(9,0)"),
        ("decimal(10,2)", "decimal(10,4)"),  # fewer integer digits
        ("decimal(10,4)", "decimal(12,2)"),  # fewer fraction digits
        ("string", "int"),
        ("int", "string"),
        ("double", "double"),  # the same type: nothing to cast
    ],
)
def test_anything_else_does_not(narrow, wide):
    assert not widens(narrow, wide)
