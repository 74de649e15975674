"""The zip a cluster session ships to its executors holds the whole rocketlake package, each module once."""

import zipfile

from rocketlake.spark.session import package_zip


def test_the_package_zip_holds_every_subpackage_once(tmp_path):
    path = package_zip(cache_dir=tmp_path)
    names = zipfile.ZipFile(path).namelist()
    assert len(names) == len(set(names))
    for module in (
        "rocketlake/__init__.py",
        "rocketlake/spark/source.py",
        "rocketlake/engine/options.py",
        "rocketlake/rocketmq/client.py",
        "rocketlake/rocketmq/columnar.py",
        "rocketlake/dagster/__init__.py",
    ):
        assert module in names, module
    assert not any(
        name.startswith(("rocketlake/rocketlake/", "assets/", "pipelines/", "resources/", "tests/")) for name in names
    )
    assert package_zip(cache_dir=tmp_path) == path  # the same files: the same zip, not rebuilt


def test_the_package_zip_is_named_by_its_contents(tmp_path, monkeypatch):
    import rocketlake.spark.session as spark_module

    first = package_zip(cache_dir=tmp_path)
    real_read = spark_module.Path.read_bytes

    def changed(self):  # one module of the checkout edited
        data = real_read(self)
        return data + b"# edited\n" if self.name == "options.py" else data

    monkeypatch.setattr(spark_module.Path, "read_bytes", changed)
    assert package_zip(cache_dir=tmp_path) != first
