"""What a member process does when an operator's tool asks it through the broker to act, as a Java push consumer does.

* **Reset offsets** (RESET_CONSUMER_CLIENT_OFFSET, ``mqadmin resetOffsetByTime`` on a broker that asks its clients):
  the broker's table goes through the rules of ``rocketlake offsets reset``: forward moves are committed, and if
  any queue would move backward nothing is changed, since the windows before it are landed and the next run would
  move the offset forward again over the ledger (``engine.offsets.plan_reset``). Nor while a run of the group
  is in flight: its commit would land on top. The request is oneway (the Java client answers nothing), so the
  verdict goes to the member's log and to its running info (``mqadmin consumerStatus``).
* **Consume one message directly** (CONSUME_MESSAGE_DIRECTLY, ``mqadmin queryMsgById -g -d``, the Dashboard's
  "resend to consumer"): the message is decoded as a run decodes it and the ingestion's listener is called on it,
  and the verdict is answered as ``ConsumeMessageDirectlyResult``. Nothing lands and no offset moves: landing
  happens in window runs only. Without a listener the verdict is whether the body decodes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from rocketlake.engine.config import IngestionConfig
from rocketlake.engine.offsets import OffsetMove, plan_reset
from rocketlake.rocketmq.client_requests import CMResult, DirectConsumeResult
from rocketlake.rocketmq.message import decode_messages
from rocketlake.rocketmq.message_queue import MessageQueue


@dataclass(frozen=True)
class ResetOutcome:
    """What a member did with one broker's reset request."""

    timestamp_ms: int  # the time the operator reset to (-1: the queues' ends)
    applied: tuple[OffsetMove, ...] = ()
    refused: str | None = None  # why nothing was changed
    unchanged: int = 0
    at_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def summary(self) -> str:
        when = datetime.fromtimestamp(self.at_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        to = "the queues' ends" if self.timestamp_ms == -1 else f"{self.timestamp_ms} ms"
        if self.refused is not None:
            return f"{when} reset to {to} REFUSED: {self.refused}"
        moved = ", ".join(f"{m.queue.key} {'-' if m.before is None else m.before}->{m.after}" for m in self.applied)
        return (
            f"{when} reset to {to}: moved {len(self.applied)} queue(s){': ' + moved if moved else ''}; "
            f"{self.unchanged} unchanged"
        )


def reset_offsets(
    broker, targets: dict[MessageQueue, int], topics: set[str], timestamp_ms: int, in_flight: Callable[[], set[str]]
) -> ResetOutcome:
    """Apply the broker's ``targets`` to the group's offsets (``broker``: the ingestion's ``GroupBroker``) by the
    rules of ``rocketlake offsets reset``; queues of topics the ingestion does not subscribe are no business of it."""
    targets = {mq: offset for mq, offset in targets.items() if mq.topic in topics}
    committed = {mq: broker.committed_offset(mq) for mq in targets}
    plan = plan_reset(committed, targets)
    if plan.backward:
        shown = ", ".join(f"{m.queue.key} {m.before}->{m.after}" for m in plan.backward[:4])
        return ResetOutcome(
            timestamp_ms,
            refused=(
                f"{len(plan.backward)} queue(s) would move backward ({shown}{', ...' if len(plan.backward) > 4 else ''}); "
                "offsets only move forward (the ledger would move them forward again); to land earlier windows again, "
                "use `rocketlake backfill`. Nothing was changed"
            ),
            unchanged=len(targets),
        )
    if plan.moves:
        runs = in_flight()
        if runs:
            return ResetOutcome(
                timestamp_ms,
                refused=(
                    f"run(s) {', '.join(sorted(runs))} of the group are in flight; reset once they end. Nothing was "
                    "changed"
                ),
                unchanged=len(targets),
            )
    for move in plan.moves:
        broker.commit_offset(move.queue, move.after)
    return ResetOutcome(timestamp_ms, applied=tuple(plan.moves), unchanged=len(plan.unchanged))


class _Undecodable(ValueError):
    """The body does not decode under ``body.format``: in a run, a failed message."""


def listener_message(cfg: IngestionConfig, body: bytes, broker_name: str) -> dict:
    """The one message of a CONSUME_MESSAGE_DIRECTLY body as the ingestion's listener gets it in a run: the
    columns the run reads (the same decoder), the original topic for a redelivered copy (resetRetryAndNamespace),
    and the body's fields. JSON fields are given as JSON values: a run's Spark types are applied when it lands."""
    from rocketlake.engine.columns import arrow_schema, landed_metadata, read_metadata
    from rocketlake.spark.source import batch_of

    [message] = decode_messages(body)[:1]
    payload = _payload(cfg, message.body)
    schema = arrow_schema(read_metadata(cfg, landed_metadata(cfg)) + ("origin_topic",), text=cfg.body.format == "text")
    row = batch_of([message], schema, broker_name).to_pylist()[0]
    row["topic"] = row.pop("origin_topic")
    if cfg.body.format == "json":
        row.update(_json_fields(cfg, payload))
    elif cfg.body.format == "variant":  # as the run's parse_json: any JSON value lands, anything else fails
        try:
            json.loads(message.body)
        except (UnicodeDecodeError, ValueError) as e:
            raise _Undecodable(f"body is not JSON: {e}") from None
    elif cfg.body.format == "text":
        try:
            message.body.decode("utf-8")
        except UnicodeDecodeError:
            raise _Undecodable("body is not valid UTF-8") from None
    elif cfg.body.format == "protobuf":  # the reader's decoder: the same columns and the same failures
        from rocketlake.engine.protobuf import BodyDecoder

        decoder = BodyDecoder(cfg.body.protobuf_descriptor_set(), cfg.body.message_name, registry=_registry(cfg))
        decoded, (error,) = decoder.decode([message.body])
        if error is not None:
            raise _Undecodable(error)
        row.update(decoded.to_pylist()[0])
    return row


def _registry(cfg: IngestionConfig):
    from rocketlake.engine.registry import SchemaLookup

    if cfg.body.framing == "none":
        return None
    return SchemaLookup(cfg.body.registry_url, cfg.body.schemas_dir)


def _payload(cfg: IngestionConfig, body: bytes) -> bytes:
    """The body without a registry's frame (framing confluent, but Protobuf's, which its decoder reads), as a run
    checks it: a body that has none is undecodable, with the reason a run gives."""
    if cfg.body.framing == "none" or cfg.body.format == "protobuf":
        return body
    from rocketlake.engine.registry import unframed

    (payload,), (error,) = unframed([body], _registry(cfg))
    if error is not None:
        raise _Undecodable(error)
    return payload


def _json_fields(cfg: IngestionConfig, body: bytes) -> dict:
    from rocketlake.engine.columns import OWN_COLUMNS
    from rocketlake.spark.body import top_level_names

    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise _Undecodable(f"body is not JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise _Undecodable(f"body is JSON but not an object (a {type(parsed).__name__})")
    names = top_level_names(cfg.body.schema_)
    if cfg.body.evolve == "add_columns":
        names += [name for name in parsed if name not in names and name not in OWN_COLUMNS]
    return {name: parsed.get(name) for name in names}


def consume_directly(cfg: IngestionConfig, body: bytes, broker_name: str) -> DirectConsumeResult:
    """The verdict of the ingestion's listener on the message (``ConsumeMessage*Service.consumeMessageDirectly``)."""
    from rocketlake.engine.listener import (
        ConsumeConcurrentlyContext,
        ConsumeOrderlyContext,
        ConsumeOrderlyStatus,
        Vectorized,
        judge_batch,
        judge_frame,
        load_listener,
    )

    began = time.monotonic()
    orderly = cfg.consume_orderly

    def result(verdict: CMResult, remark: str | None = None) -> DirectConsumeResult:
        return DirectConsumeResult(
            verdict, order=orderly, remark=remark, spent_time_ms=int((time.monotonic() - began) * 1000)
        )

    try:
        message = listener_message(cfg, body, broker_name)
    except _Undecodable as e:  # a run sends such a message back, as it does one its listener refuses
        return result(CMResult.CR_LATER, str(e))
    if cfg.listener is None:
        remark = (
            "no listener: the body decodes"
            if cfg.body.format != "avro"
            else ("no listener; Avro bodies are decoded by Spark when a window run lands them")
        )
        return result(CMResult.CR_SUCCESS, remark)
    try:
        listener = load_listener(cfg.listener)
        if isinstance(listener, Vectorized):
            import pandas as pd

            errors, _ = judge_frame(listener(pd.DataFrame([message])), 1)
        elif orderly:
            key = f"{message['topic']}/{message['broker_name']}/{message['queue_id']}"
            answer = listener([message], ConsumeOrderlyContext(key))
            if answer is None:
                return result(CMResult.CR_RETURN_NULL)
            ok = answer in (ConsumeOrderlyStatus.SUCCESS, "SUCCESS")
            return result(CMResult.CR_SUCCESS if ok else CMResult.CR_LATER)
        else:
            context = ConsumeConcurrentlyContext(1)
            answer = listener([message], context)
            if answer is None:
                return result(CMResult.CR_RETURN_NULL)
            errors = judge_batch(answer, context)
    except Exception as e:  # UtilAll.exceptionSimpleDesc: the exception and where
        return result(CMResult.CR_THROW_EXCEPTION, f"{type(e).__name__}: {e}"[:1000])
    return result(CMResult.CR_SUCCESS) if errors[0] is None else result(CMResult.CR_LATER, errors[0])
