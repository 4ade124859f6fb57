"""The optional LLM judge of `agentcompass analyze --judge MODEL`: a rubric (analyze/rubric.yaml, or the user's)
answered per attempt from its trajectory, diff and verifier output, as one JSON object validated with pydantic;
then a job-level summary of the failure patterns over every attempt's verdict (as Harbor's `harbor analyze`
writes one per job). The model is called through `Complete`, which the command builds from the project's own
model routing and meter (commands/analyze_judge.py), so this module stays a reader that never runs anything.

A reply that is not the object the rubric asks for is that attempt's one-line error, never a crash. A quote the
judge gives as evidence is looked up in the step it names: `quote_found` says whether it is really there."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agentcompass.core.errors import UserError
from agentcompass.core.secret_values import scrub

DEFAULT_RUBRIC = Path(__file__).with_name("rubric.yaml")
STEP_CHARS, OUTPUT_CHARS, TRANSCRIPT_CHARS, PATCH_CHARS, LOG_CHARS = 2_000, 1_500, 60_000, 20_000, 6_000
MEDIUM = "medium"  # a judge's fail is evidence for a reviewer, never proof
NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


class Criterion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME.pattern)
    description: str
    guidance: str
    flags: bool = False  # a fail flags the attempt


class Rubric(BaseModel):
    model_config = ConfigDict(extra="forbid")
    criteria: list[Criterion] = Field(min_length=1)


class Evidence(BaseModel):
    step: int | None = None
    quote: str = ""


class Check(BaseModel):
    outcome: Literal["pass", "fail", "not_applicable"]
    explanation: str
    evidence: list[Evidence] = Field(default_factory=list)


@dataclass
class Reply:
    """One answered model call: its text and what the meter counted."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True


Complete = Callable[[list[dict[str, str]]], Reply]  # raises on a failed call; its message is the attempt's error


def load_rubric(path: Path | None) -> tuple[Rubric, str]:
    """The rubric and its text (part of the cache key); a bad user file is one line."""
    path = path or DEFAULT_RUBRIC
    try:
        text = path.read_text(encoding="utf-8")
        return Rubric.model_validate(yaml.safe_load(text)), text
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) else str(exc).splitlines()[0] if isinstance(exc, yaml.YAMLError) \
            else "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])  # type: ignore[union-attr]
        raise UserError(f"--rubric {path}: not a rubric ({detail}); write `criteria:` as a list of name, description, "
                        f"guidance (and flags: true|false), as agentcompass/analyze/rubric.yaml does") from None


def verdict_model(rubric: Rubric) -> type[BaseModel]:
    """The reply's shape: a summary, the failure pattern (for an attempt that did not pass) and one check a criterion."""
    checks = create_model("JudgeChecks", **{c.name: (Check, ...) for c in rubric.criteria})  # type: ignore[call-overload]
    return create_model("JudgeVerdict", summary=(str, ...), failure_pattern=(str | None, None), checks=(checks, ...))


def transcript(steps: list[dict[str, Any]]) -> str:
    """The trajectory as numbered steps (what the agent said, each command and the start of its output), cut to fit."""
    parts = []
    for step in steps:
        lines = [f"## step {step.get('number')}"]
        if step.get("text"):
            lines.append(f"says: {str(step['text'])[:STEP_CHARS]}")
        for action in step.get("actions", []):
            lines.append(f"$ {str(action.get('command', ''))[:STEP_CHARS]}")
            if action.get("output"):
                lines.append(str(action["output"])[:OUTPUT_CHARS])
        parts.append("\n".join(lines))
    text = "\n".join(parts)
    return text if len(text) <= TRANSCRIPT_CHARS else text[:TRANSCRIPT_CHARS // 2] + "\n[... cut ...]\n" + text[-TRANSCRIPT_CHARS // 2:]


def messages(rubric: Rubric, verdict: type[BaseModel], attempt: dict[str, Any]) -> list[dict[str, str]]:
    """The judge's prompt: the rubric, the attempt's record and evidence, and the JSON object to answer with."""
    criteria = "\n".join(f"- {c.name}: {c.description} {c.guidance}" for c in rubric.criteria)
    system = ("You review one attempt of a coding agent at a benchmark task, for people comparing agents. Judge only "
              "from the material given. Answer with a single JSON object and nothing else, matching this JSON schema:\n"
              + json.dumps(verdict.model_json_schema()))
    record = {k: attempt["trial"].get(k) for k in ("task_id", "attempt", "status", "error_category", "message",
                                                   "agent_exit_status", "reward")}
    patches = "\n".join(f"### {name}\n{text[:PATCH_CHARS]}" for name, text in attempt["patches"].items())
    user = (f"Criteria (answer each with outcome pass, fail or not_applicable, an explanation, and evidence: the step "
            f"number and a short exact quote of the command or output it rests on):\n{criteria}\n\n"
            f"Also give `summary` (3-5 sentences: what the agent tried, what went wrong, how close it got) and, when the "
            f"attempt did not pass, `failure_pattern` (a few words naming why it failed, e.g. 'wrong fix, tests still "
            f"fail', 'ran out of steps'); null when it passed.\n\n"
            f"# The attempt's record\n{json.dumps(record)}\n\n"
            f"# The task as the agent was given it\n{attempt['instruction'][:STEP_CHARS * 2] or '(not kept)'}\n\n"
            f"# The trajectory\n{attempt['transcript'] or '(no trajectory kept)'}\n\n"
            f"# The agent's change\n{patches or '(no diff kept)'}\n\n"
            f"# The verifier's output (end)\n{attempt['verifier_log'][-LOG_CHARS:] or '(none)'}")
    return [{"role": "system", "content": scrub(system)}, {"role": "user", "content": scrub(user)}]


def cache_key(model_name: str, rubric_text: str, prompt: list[dict[str, str]]) -> str:
    """The same model, rubric and prompt (the attempt's material included) give the same verdict: not asked again."""
    return hashlib.sha256(json.dumps([model_name, rubric_text, prompt]).encode()).hexdigest()[:32]


def parse(text: str, verdict: type[BaseModel]) -> dict[str, Any]:
    """The reply's JSON object (a ```json fence or words around it are tolerated), validated; ValueError in one line."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"the judge's reply holds no JSON object: {text[:120]!r}")
    try:
        return verdict.model_validate_json(text[start:end + 1]).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"the judge's reply is not the rubric's object ({'.'.join(map(str, first['loc']))}: "
                         f"{first['msg']}; {exc.error_count()} problem(s))") from None


def quote_found(steps: list[dict[str, Any]], evidence: dict[str, Any]) -> bool:
    """Whether the quote is in the step it names (anywhere in the trajectory when it names none)."""
    quote = " ".join(str(evidence.get("quote") or "").split())
    if not quote:
        return False
    chosen = [s for s in steps if s.get("number") == evidence.get("step")] if evidence.get("step") is not None else steps
    words = [str(s.get("text") or "") for s in chosen]
    words += [f"{a.get('command', '')} {a.get('output', '')}" for s in chosen for a in s.get("actions", [])]
    return quote in " ".join(" ".join(words).split())


def judge_attempt(complete: Complete, rubric: Rubric, rubric_text: str, model_name: str, attempt: dict[str, Any],
                  cached: dict[str, Any] | None) -> dict[str, Any]:
    """The attempt's judge record: its verdict (or `error`), usage and cost; a cached record of the same key again."""
    verdict = verdict_model(rubric)
    prompt = messages(rubric, verdict, attempt)
    key = cache_key(model_name, rubric_text, prompt)
    if cached and cached.get("key") == key and "error" not in cached:
        return {**cached, "cached": True}
    record: dict[str, Any] = {"model": model_name, "key": key, "cached": False}
    try:
        reply = complete(prompt)
    except Exception as exc:  # the call failed after the client's own retries: this attempt's error, the run goes on
        return {**record, "error": f"the judge's call failed: {' '.join(str(exc).split())[:300]}",
                "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "cost_known": True}
    record.update(tokens_in=reply.tokens_in, tokens_out=reply.tokens_out, cost_usd=reply.cost_usd, cost_known=reply.cost_known)
    try:
        found = parse(reply.text, verdict)
    except ValueError as exc:
        return {**record, "error": str(exc)}
    for check in found["checks"].values():
        for evidence in check["evidence"]:
            evidence["quote_found"] = quote_found(attempt["steps"], evidence)
    return {**record, **found}


def judge_flags(record: dict[str, Any], rubric: Rubric) -> list[dict[str, Any]]:
    """A flag per failed criterion that flags: the judge's explanation, with its first evidence (step and quote)."""
    flags = []
    for criterion in rubric.criteria:
        check = (record.get("checks") or {}).get(criterion.name)
        if not criterion.flags or not check or check["outcome"] != "fail":
            continue
        first = (check.get("evidence") or [{}])[0]
        where = {k: first[k] for k in ("step", "quote", "quote_found") if first.get(k) is not None}
        flags.append({"detector": "judge", "severity": MEDIUM, "criterion": criterion.name,
                      "evidence": f"{criterion.name}: {check['explanation']}", **where})
    return flags


def job_summary(complete: Complete, rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Reply]]:
    """The failure patterns over every judged attempt, in a few sentences (one more call); the reply's usage."""
    judged = [r for r in rows if (r.get("judge") or {}).get("summary")]
    if not judged:
        return {"text": None, "error": "no attempt was judged"}, []
    lines = "\n".join(
        f"- {r['task_id']} attempt {r['attempt']} ({r['status']}; failure mode {(r.get('failure_mode') or {}).get('mode')}; "
        f"flags {sorted({f['detector'] for f in r['flags']})}): {r['judge']['summary']} "
        f"Pattern: {r['judge'].get('failure_pattern')}. "
        + " ".join(f"{name}={c['outcome']}" for name, c in r["judge"]["checks"].items()) for r in judged)
    prompt = [{"role": "system", "content": "You summarise a benchmark run of a coding agent for people comparing agents."},
              {"role": "user", "content": scrub(
                  f"Per-attempt reviews of one run:\n{lines}\n\nIn at most 8 sentences: how many attempts passed and "
                  f"failed; the common failure patterns (name the attempts); whether any attempt gamed its grading and "
                  f"how; task-specification problems affecting several attempts; how close the failed attempts got. "
                  f"Plain text, no JSON.")}]
    try:
        reply = complete(prompt)
    except Exception as exc:
        return {"text": None, "error": f"the judge's call failed: {' '.join(str(exc).split())[:300]}"}, []
    return {"text": reply.text.strip()}, [reply]
