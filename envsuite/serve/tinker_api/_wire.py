"""The SDK's protobuf wire format, server side: decode what it sends, encode what it decodes.

tinker 0.38 sends ``forward_backward`` as a ``tinker_public_pb2.ForwardBackwardRequest`` (optionally
zstd-compressed) and reads ``ForwardBackwardOutput`` and ``SampleResponse`` results as protobuf; its
``proto/request_conv.py`` and ``proto/response_conv.py`` are the other halves of these functions.
Everything else travels as JSON of the ``tinker.types`` models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

PROTO_CONTENT_TYPE = "application/x-protobuf"

_NUMPY_OF_DTYPE: dict[int, np.dtype[Any]] = {
    pb.DTYPE_FLOAT32: np.dtype(np.float32),
    pb.DTYPE_INT64: np.dtype(np.int64),
    pb.DTYPE_INT32: np.dtype(np.int32),
}
_TENSOR_DTYPE_OF_DTYPE: dict[int, types.TensorDtype] = {
    pb.DTYPE_FLOAT32: "float32",
    pb.DTYPE_INT64: "int64",
    pb.DTYPE_INT32: "int64",
}
_DTYPE_OF_TENSOR_DTYPE: dict[str, pb.DType.ValueType] = {"float32": pb.DTYPE_FLOAT32, "int64": pb.DTYPE_INT64}
_STOP_REASON: dict[str, int] = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


class WireError(ValueError):
    """A request body that is not the protobuf message it should be (a 400 for the client)."""


# -- requests ------------------------------------------------------------------------------------


def _tensor(msg: pb.Tensor, where: str) -> types.TensorData:
    np_dtype = _NUMPY_OF_DTYPE.get(msg.dtype)
    dtype = _TENSOR_DTYPE_OF_DTYPE.get(msg.dtype)
    if np_dtype is None or dtype is None:
        raise WireError(f"{where}: unsupported tensor dtype {msg.dtype}")
    shape = list(msg.shape) or None
    try:
        if msg.HasField("sparse_csr"):
            csr = msg.sparse_csr
            return types.TensorData(
                data=np.frombuffer(csr.values, dtype=np_dtype).copy(),
                dtype=dtype,
                shape=shape,
                sparse_crow_indices=np.frombuffer(csr.crow_indices, dtype=np.int64).tolist(),
                sparse_col_indices=np.frombuffer(csr.col_indices, dtype=np.int64).tolist(),
            )
        values = np.frombuffer(msg.dense, dtype=np_dtype).copy()
    except ValueError as exc:
        raise WireError(f"{where}: malformed tensor bytes ({exc})") from exc
    if shape is not None and int(np.prod(shape)) != values.size:
        raise WireError(f"{where}: shape {shape} does not hold {values.size} values")
    return types.TensorData(data=values, dtype=dtype, shape=shape)


def _chunk(msg: pb.Chunk, where: str) -> types.ModelInputChunk:
    kind = msg.WhichOneof("chunk")
    if kind != "encoded_text":
        raise WireError(
            f"{where}: {kind or 'empty'} chunks are not supported by the local backend (tokens only)"
        )
    try:
        tokens = np.frombuffer(msg.encoded_text.tokens, dtype=np.int32)
    except ValueError as exc:
        raise WireError(f"{where}: malformed token bytes ({exc})") from exc
    return types.EncodedTextChunk(tokens=[int(t) for t in tokens])


def _span(msg: pb.ProvenanceSpan, where: str) -> types.PromptProvenanceSpan | types.SampledProvenanceSpan:
    kind = msg.WhichOneof("span")
    try:
        if kind == "sampled_tokens":
            arm = msg.sampled_tokens
            return types.SampledProvenanceSpan(
                sequence_id=arm.sequence_id, offset=arm.offset, length=arm.length
            )
        if kind == "prompt_tokens":
            arm_prompt = msg.prompt_tokens
            return types.PromptProvenanceSpan(
                sequence_id=arm_prompt.sequence_id, offset=arm_prompt.offset, length=arm_prompt.length
            )
    except ValueError as exc:
        raise WireError(f"{where}: {exc}") from exc
    raise WireError(
        f"{where}: a provenance span must be prompt_tokens or sampled_tokens, got {kind or 'neither'}"
    )


def _spans(datum: pb.Datum, i: int) -> tuple[types.ProvenanceSpans | None, types.ProvenanceSpans | None]:
    """A datum's provenance (``Datum.with_provenance``): both span lists, or neither."""
    inputs = [_span(s, f"datum {i} model_input_spans[{j}]") for j, s in enumerate(datum.model_input_spans)]
    targets = [
        _span(s, f"datum {i} loss_fn_input_spans[{j}]") for j, s in enumerate(datum.loss_fn_input_spans)
    ]
    if not inputs and not targets:
        return None, None
    return inputs, targets


def _loss_config(msg: pb.ForwardBackwardRequest) -> dict[str, float | str] | None:
    if msg.loss_fn_config_v2:
        config: dict[str, float | str] = {}
        for key, value in msg.loss_fn_config_v2.items():
            config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
        return config
    if msg.loss_fn_config:
        return {key: float(value) for key, value in msg.loss_fn_config.items()}
    return None


def decode_forward_backward(body: bytes) -> tuple[types.ForwardBackwardRequest, bool]:
    """The request and its ``forward_only`` flag from a protobuf body."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf raises its own DecodeError
        raise WireError(f"forward_backward body is not a ForwardBackwardRequest protobuf ({exc})") from exc
    data = []
    for i, datum in enumerate(msg.data):
        chunks = [_chunk(c, f"datum {i} chunk {j}") for j, c in enumerate(datum.model_input)]
        inputs = {
            name: _tensor(t, f"datum {i} loss_fn_inputs[{name!r}]")
            for name, t in datum.loss_fn_inputs.items()
        }
        model_input_spans, loss_fn_input_spans = _spans(datum, i)
        data.append(
            types.Datum(
                model_input=types.ModelInput(chunks=chunks),
                loss_fn_inputs=inputs,
                model_input_spans=model_input_spans,
                loss_fn_input_spans=loss_fn_input_spans,
            )
        )
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=data,
            loss_fn=msg.loss_fn,  # type: ignore[arg-type]  # any name; the local backend lists what it takes
            loss_fn_config=_loss_config(msg),
        ),
        model_id=msg.model_id,
        seq_id=msg.seq_id,
    )
    return request, bool(msg.forward_only)


# -- responses -----------------------------------------------------------------------------------


def encode_sample_response(response: types.SampleResponse) -> bytes:
    """``SampleResponse`` as the protobuf the SDK's ``deserialize_sample_response`` reads."""
    msg = pb.SampleResponse(prompt_cache_hit_tokens=response.prompt_cache_hit_tokens)
    for seq in response.sequences:
        out = msg.sequences.add()
        out.stop_reason = _STOP_REASON[seq.stop_reason]
        out.tokens = np.asarray(seq.tokens, dtype=np.int32).tobytes()
        if seq.logprobs is not None:
            out.logprobs = np.asarray(seq.logprobs, dtype=np.float32).tobytes()
        if seq.topk_logprobs_np is not None:
            topk = seq.topk_logprobs_np
            length, k = topk.token_ids.shape
            out.topk_sampled_logprobs.CopyFrom(
                pb.TopkLogprobs(
                    token_ids=np.ascontiguousarray(topk.token_ids, dtype=np.int32).tobytes(),
                    logprobs=np.ascontiguousarray(topk.logprobs, dtype=np.float32).tobytes(),
                    k=k,
                    length=length,
                )
            )
    if response.prompt_logprobs is not None:
        values = [np.nan if x is None else x for x in response.prompt_logprobs]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return msg.SerializeToString()


def _batched(arrays: list[np.ndarray], dtype: pb.DType.ValueType) -> pb.BatchedTensor:
    np_dtype = _NUMPY_OF_DTYPE[dtype]
    flat = [np.ascontiguousarray(a, dtype=np_dtype).reshape(-1) for a in arrays]
    sizes = np.asarray([0, *[a.nbytes for a in flat]], dtype=np.int64)
    data = b"".join(a.tobytes() for a in flat)
    return pb.BatchedTensor(data=data, offsets=np.cumsum(sizes).tobytes(), dtype=dtype)


def encode_forward_backward_output(output: types.ForwardBackwardOutput) -> bytes:
    """``ForwardBackwardOutput`` as one batched ``ArrayRecord`` (what ``deserialize_forward_backward_output`` reads)."""
    msg = pb.ForwardBackwardOutput(
        loss_fn_output_type=output.loss_fn_output_type, metrics=dict(output.metrics)
    )
    outputs: list[Mapping[str, types.TensorData]] = list(output.loss_fn_outputs)
    if outputs:
        record = msg.loss_fn_outputs.add()
        record.num_datums = len(outputs)
        for name in outputs[0]:
            dtype = _DTYPE_OF_TENSOR_DTYPE[outputs[0][name].dtype]
            record.fields[name].CopyFrom(_batched([o[name].to_numpy() for o in outputs], dtype))
    return msg.SerializeToString()
