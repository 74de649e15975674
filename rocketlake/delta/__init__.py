"""The Delta side: the table writer, the ledger read from the table's log, schema evolution, where the lake is
(``storage.py``), and delta-rs reads that check the table's protocol first."""
