"""The merge's lineage (``core.lineage``) as OpenLineage's classes.

Imported only when the OpenLineage provider (the ``openlineage`` extra) asks an operator for its facets: without
that provider nothing here is loaded, and the pipeline runs the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.generated.base import Dataset, DatasetFacet
from openlineage.client.generated.column_lineage_dataset import (
    ColumnLineageDatasetFacet,
    Fields,
    InputField,
    Transformation,
)
from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields

from airflow_cdc_provider.core.lineage import LineageDataset, TableLineage


def operator_lineage(tables: Sequence[TableLineage]) -> OperatorLineage[Dataset, Any]:
    """Inputs: each source table once; outputs: each Hive table, its schema, and each column's source column."""
    inputs: dict[tuple[str, str], Dataset] = {}
    outputs = []
    for table in tables:
        source = table.source
        inputs.setdefault((source.namespace, source.name), _dataset(source))
        # The column is copied as it is: DIRECT/IDENTITY in the spec's terms (the type may become Hive's).
        lineage = ColumnLineageDatasetFacet(fields={
            column: Fields(inputFields=[InputField(namespace=source.namespace, name=source.name, field=from_column,
                                                   transformations=[Transformation(type="DIRECT",
                                                                                   subtype="IDENTITY")])])
            for column, from_column in table.columns})
        outputs.append(_dataset(table.target, columnLineage=lineage))
    return OperatorLineage(inputs=list(inputs.values()), outputs=outputs)


def _dataset(dataset: LineageDataset, **facets: DatasetFacet) -> Dataset:
    fields = [SchemaDatasetFacetFields(name=name, type=kind) for name, kind in dataset.fields]
    schema = SchemaDatasetFacet(fields=fields)
    all_facets: dict[str, DatasetFacet] = {"schema": schema, **facets}
    return Dataset(namespace=dataset.namespace, name=dataset.name, facets=all_facets)
