#!/usr/bin/env python3
"""Reference renders for weft's chat-template interpreter (runtime/src/text/chat.c).

Renders chat templates with Jinja2 in the environment transformers' apply_chat_template builds
(ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension,
a {% generation %} tag, a tojson that calls json.dumps with ensure_ascii=False, and the
raise_exception / strftime_now / dict / namespace globals) and stores inputs and expected
outputs as JSON lines for tests/unit/test_chat.c:

  tests/data/chat/cases.jsonl     Qwen3 (from $WEFT_SHARED_DIR) and Llama 3 / 3.1 / 3.2 templates
                                  over a few hundred generated conversations
  tests/data/chat/features.jsonl  one small template per Jinja construct

strftime_now reads a fixed clock passed per case (the C side takes it as extra "strftime_now").

Usage: python3 -m venv /work/venv && /work/venv/bin/pip install jinja2
       /work/venv/bin/python tools/scripts/chat_refs.py
"""
import copy
import datetime
import json
import os
import random
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("WEFT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
OUT = os.path.join(ROOT, "tests", "data", "chat")
QWEN_DIR = os.path.join(SHARED, "models", "qwen3-tokenizer")


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body, as transformers' AssistantTracker
    does when no assistant mask is requested."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class Namespace(jinja2.utils.Namespace):
    """transformers' namespace: refuses underscore-prefixed attribute names."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError("underscore-prefixed namespace attribute")


class TemplateDict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)


def make_env(now):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = Namespace
    return env


def parse_clock(text):
    return datetime.datetime.fromisoformat(text)


def render(source, messages, add_generation_prompt, extra, special=None):
    """Returns (output, None) or (None, error record)."""
    extra = dict(extra or {})
    clock = extra.pop("strftime_now", None)
    env = make_env(parse_clock(clock) if clock else datetime.datetime.now())
    try:
        tmpl = env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        return None, {"kind": "syntax", "message": str(e)}
    except (jinja2.exceptions.TemplateAssertionError, SyntaxError) as e:
        # Jinja2 leaves some checks (break outside a loop) to Python's compiler
        return None, {"kind": "syntax", "message": str(e)}
    variables = dict(special or {})
    variables.update(extra)
    tools = variables.pop("tools", None)
    documents = variables.pop("documents", None)
    try:
        out = tmpl.render(messages=messages, tools=tools, documents=documents,
                          add_generation_prompt=add_generation_prompt, **variables)
    except Exception as e:  # every runtime failure must be an error on the C side too
        kind = "raise" if type(e) is jinja2.exceptions.TemplateError else "runtime"
        return None, {"kind": kind, "type": type(e).__name__, "message": str(e)}
    return out, None


def special_tokens(cfg):
    """The variables weft_chat_template_load sets from tokenizer_config.json."""
    out = {}

    def text(v):
        if isinstance(v, str):
            return v
        if isinstance(v, dict) and isinstance(v.get("content"), str):
            return v["content"]
        return None

    for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
              "mask_token"):
        t = text(cfg.get(k))
        if t is not None:
            out[k] = t
    extra = cfg.get("additional_special_tokens")
    if isinstance(extra, list):
        out["additional_special_tokens"] = [t for t in (text(e) for e in extra) if t is not None]
    return out


# ---- conversation generator ------------------------------------------------------------------
SNIPPETS = [
    "Hello!", "What's the weather in Paris?", "Explain quantum tunnelling in one sentence.",
    "  leading and trailing spaces  ", "\n\nnewlines around\n\n", "tabs\tand\ttabs",
    "", " ", "Ünïcödé — “quotes” ‘single’ …", "中文消息：你好，世界", "日本語のテキスト",
    "emoji 😀🎉👩‍👩‍👧 mixed", "Arabic العربية and Hebrew עברית", "Ελληνικά και Русский текст",
    "math: 1 < 2 && 3 > 2, a & b", "quotes: 'single' \"double\" `back`", "backslash \\ path C:\\dir",
    "json-ish {\"a\": 1, \"b\": [1, 2]}", "jinja-ish {{ not_a_var }} {% if %} {# c #}",
    "<tool_call>not really</tool_call>", "line1\nline2\r\nline3", "\u2028line sep\u2029para sep",
    "zero\u200bwidth and nbsp\u00a0here", "control \x01\x07\x1b chars", "ends with newline\n",
    "A" * 300, "multi\n\n\nblank\n\n\nlines", "<|im_start|>fake<|im_end|>",
]

THOUGHTS = [
    "Let me think about this.", "\nStep 1: parse.\nStep 2: answer.\n", "", "  spaced thought  ",
    "思考中……", "Consider <b>tags</b> & entities.",
]

TOOL_NAMES = ["get_weather", "search", "calculator", "lookup_user", "send_email"]


def rand_args(rng):
    choices = [
        {"location": "Paris", "unit": "celsius"},
        {"query": "weft runtime", "max_results": 5},
        {"expression": "2 ** 10", "precise": True},
        {"user_id": 12345, "fields": ["name", "email"], "filter": None},
        {"to": "a@b.c", "subject": "Hi <there> & 'you'", "body": "Line1\nLine2 ünï 😀"},
        {"nested": {"a": [1, 2.5, -3, 1e-07, 1e+20], "b": {"c": "d"}}, "empty": {}, "list": []},
        {},
        {"value": 0.1, "big": 12345678901234, "neg": -0.0},
    ]
    return rng.choice(choices)


def rand_tool_call(rng, wrap):
    args = rand_args(rng)
    if rng.random() < 0.3:
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    call = {"name": rng.choice(TOOL_NAMES), "arguments": args}
    if wrap:
        return {"type": "function", "id": "call_%d" % rng.randint(0, 999), "function": call}
    return call


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather <for> a city & 'region'",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web — ünïcödé 検索",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer", "default": 10}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "calculator", "description": "", "parameters": {"type": "object", "properties": {}}}},
]


def text(rng):
    return rng.choice(SNIPPETS)


def qwen_conversation(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", text(rng)])})
    turns = rng.randint(1, 4)
    for t in range(turns):
        u = text(rng)
        if rng.random() < 0.1:
            u = "<tool_response>\n" + u + "\n</tool_response>"
        msgs.append({"role": "user", "content": u})
        if t == turns - 1 and rng.random() < 0.5:
            break
        # assistant, possibly with tool calls and tool responses
        a = {"role": "assistant"}
        style = rng.random()
        content = text(rng)
        if style < 0.25:
            a["reasoning_content"] = rng.choice(THOUGHTS)
        elif style < 0.45:
            content = "<think>" + rng.choice(THOUGHTS) + "</think>" + rng.choice(["", "\n\n", "\n"]) + content
        elif style < 0.5:
            a["reasoning_content"] = None
        a["content"] = content
        if rng.random() < 0.35:
            wrap = rng.random() < 0.7
            a["tool_calls"] = [rand_tool_call(rng, wrap) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.3:
                a["content"] = ""
            msgs.append(a)
            for _ in range(rng.randint(1, len(a["tool_calls"]))):
                msgs.append({"role": "tool", "content": rng.choice(
                    ['{"temperature": 21, "unit": "celsius"}', "no results", text(rng)])})
            if rng.random() < 0.5:
                msgs.append({"role": "assistant", "content": text(rng)})
        else:
            msgs.append(a)
    if rng.random() < 0.1 and len(msgs) > 2:
        msgs.insert(rng.randint(1, len(msgs) - 1), {"role": "system", "content": "mid-conversation system"})
    return msgs


def llama_conversation(rng, builtin):
    msgs = []
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": text(rng)})
    for t in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": text(rng)})
        r = rng.random()
        if r < 0.25:
            calls = 1 if rng.random() < 0.9 else 2
            fn = []
            for _ in range(calls):
                name = rng.choice(builtin) if builtin and rng.random() < 0.5 else rng.choice(TOOL_NAMES)
                args = rand_args(rng)
                if builtin and name in builtin:
                    args = {"query": rng.choice(["weft", "ünï \"q\""]), "lang": "en"}
                fn.append({"type": "function", "function": {"name": name, "arguments": args}})
            msgs.append({"role": "assistant", "tool_calls": fn})
            content = rng.choice(['{"temperature": 21}', "plain result", {"temp": 21, "ok": True}, ["a", 1]])
            msgs.append({"role": rng.choice(["tool", "ipython"]), "content": content})
        elif r < 0.9:
            msgs.append({"role": "assistant", "content": text(rng)})
    return msgs


def make_cases():
    rng = random.Random(20240726)
    cases = []
    with open(os.path.join(QWEN_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    qwen_src = cfg["chat_template"]
    qwen_special = special_tokens(cfg)
    clocks = ["2024-07-26T12:30:45", "2025-01-01", "1999-12-31T23:59:59", "2024-02-29T06:05:04"]

    def add(template, source, msgs, agp, extra, special):
        out, err = render(source, copy.deepcopy(msgs), agp, copy.deepcopy(extra), special)
        case = {"template": template, "messages": msgs, "add_generation_prompt": agp, "extra": extra}
        if err:
            case["error"] = err
        else:
            case["expected"] = out
        cases.append(case)

    for i in range(260):
        msgs = qwen_conversation(rng)
        extra = {}
        r = rng.random()
        if r < 0.3:
            extra["enable_thinking"] = False
        elif r < 0.5:
            extra["enable_thinking"] = True
        if rng.random() < 0.3:
            extra["tools"] = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
        add("qwen3", qwen_src, msgs, rng.random() < 0.6, extra, qwen_special)
    # Qwen3 edge cases
    add("qwen3", qwen_src, [], True, {}, qwen_special)
    add("qwen3", qwen_src, [{"role": "user", "content": "hi"}, {"role": "assistant"}], False, {}, qwen_special)
    add("qwen3", qwen_src, [{"role": "user", "content": "hi"},
                            {"role": "assistant", "content": "a</think>b</think>c"}], True, {}, qwen_special)
    add("qwen3", qwen_src, [{"role": "tool", "content": "first"}], False, {}, qwen_special)

    llama = {}
    for name in ("llama3", "llama3_1", "llama3_2"):
        with open(os.path.join(OUT, name + ".jinja"), encoding="utf-8") as f:
            llama[name] = f.read()
    special = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    for i in range(40):
        msgs = [m for m in llama_conversation(rng, None) if "content" in m]
        add("llama3", llama["llama3"], msgs, rng.random() < 0.5, dict(special), None)
    for name in ("llama3_1", "llama3_2"):
        for i in range(70):
            builtin = None
            extra = dict(special)
            extra["strftime_now"] = rng.choice(clocks)
            if rng.random() < 0.3:
                extra["date_string"] = rng.choice(["01 Jan 2025", "26 Jul 2024"])
            if rng.random() < 0.4:
                extra["tools"] = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
                if rng.random() < 0.5:
                    extra["tools_in_user_message"] = rng.random() < 0.5
            if name == "llama3_1" and rng.random() < 0.25:
                builtin = ["brave_search", "wolfram_alpha"] + (["code_interpreter"] if rng.random() < 0.5 else [])
                extra["builtin_tools"] = builtin
            msgs = llama_conversation(rng, builtin)
            add(name, llama[name], msgs, rng.random() < 0.5, extra, None)
        add(name, llama[name], [], True, dict(special, tools=TOOLS[:1], strftime_now=clocks[0]), None)
    return cases


# ---- feature suite ------------------------------------------------------------------------------
# Templates written in the style of published ones (not copies): role alternation checks,
# system-role rejection, namespace bookkeeping over tool calls, recursive type macros, and
# multimodal content lists.
MISTRAL_LIKE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

GEMMA_LIKE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")

DEEPSEEK_LIKE = """{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}
{%- set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{% endif %}
{%- endfor %}
{{- bos_token }}{{ ns.system_prompt }}
{%- for message in messages %}
    {%- if message['role'] == 'user' %}
        {%- set ns.is_tool = false -%}
        {{- '<|User|>' + message['content'] }}
    {%- endif %}
    {%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] is not none %}
        {%- set ns.is_tool = false -%}
        {%- for tool in message['tool_calls'] %}
            {%- if not ns.is_first %}
                {{- '<|Assistant|><|tool_calls_begin|><|tool_call_begin|>' + tool['type'] + '<|tool_sep|>' + tool['function']['name'] + '\\n```json\\n' + tool['function']['arguments'] + '\\n```<|tool_call_end|>' }}
                {%- set ns.is_first = true -%}
            {%- else %}
                {{- '\\n<|tool_call_begin|>' + tool['type'] + '<|tool_sep|>' + tool['function']['name'] + '\\n```json\\n' + tool['function']['arguments'] + '\\n```<|tool_call_end|>' }}
            {%- endif %}
        {%- endfor %}
        {{- '<|tool_calls_end|><|end_of_sentence|>' }}
    {%- endif %}
    {%- if message['role'] == 'assistant' and (message['tool_calls'] is not defined or message['tool_calls'] is none) %}
        {%- set content = message['content'] %}
        {%- if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}
        {%- if ns.is_tool %}{{ '<|tool_outputs_end|>' + content + '<|end_of_sentence|>' }}{% set ns.is_tool = false %}
        {%- else %}{{ '<|Assistant|>' + content + '<|end_of_sentence|>' }}{% endif %}
    {%- endif %}
    {%- if message['role'] == 'tool' %}
        {%- set ns.is_tool = true -%}
        {%- if ns.is_output_first %}
            {{- '<|tool_outputs_begin|><|tool_output_begin|>' + message['content'] + '<|tool_output_end|>' }}
            {%- set ns.is_output_first = false %}
        {%- else %}
            {{- '\\n<|tool_output_begin|>' + message['content'] + '<|tool_output_end|>' }}
        {%- endif %}
    {%- endif %}
{%- endfor -%}
{% if ns.is_tool %}{{ '<|tool_outputs_end|>' }}{% endif %}
{% if add_generation_prompt and not ns.is_tool %}{{ '<|Assistant|><think>\\n' }}{% endif %}"""

HERMES_LIKE = """{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"} %}
{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec|items) + "]" if json_spec.items is not mapping else "list[" + json_to_python_type(json_spec['items']) + "]" }}
{%- elif json_spec.type == "object" %}
    {%- if json_spec.additionalProperties is defined %}
        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']' }}
    {%- else %}
        {{- "dict" }}
    {%- endif %}
{%- elif json_spec.type is iterable and json_spec.type is not string %}
    {{- "Union[" }}{%- for t in json_spec.type %}{{- json_to_python_type({"type": t}) }}{%- if not loop.last %}{{- "," }}{%- endif %}{%- endfor %}{{- "]" }}
{%- elif json_spec.anyOf is defined %}
    {{- "Union[" }}{%- for t in json_spec.anyOf %}{{- json_to_python_type(t) }}{%- if not loop.last %}{{- "," }}{%- endif %}{%- endfor %}{{- "]" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}
{%- for tool in tools %}
    {%- if tool.function is defined %}{%- set tool = tool.function %}{%- endif %}
    {{- '{"type": "function", "function": ' }}
    {{- '{"name": "' + tool.name + '", ' }}
    {{- '"description": "' + tool.name + '(' }}
    {%- for param_name, param_fields in tool.parameters.properties|items %}
        {{- param_name + ": " + json_to_python_type(param_fields) }}
        {%- if not loop.last %}{{- ", " }}{%- endif %}
    {%- endfor %}
    {{- ")" }}
    {%- if tool.return is defined %}{{- " -> " + json_to_python_type(tool.return) }}{%- endif %}
    {{- " - " + tool.description.strip() + "\\n\\n" }}
    {%- for param_name, param_fields in tool.parameters.properties|items %}
        {%- if loop.first %}{{- "    Args:\\n" }}{%- endif %}
        {{- "        " + param_name + "(" + json_to_python_type(param_fields) + "): " + param_fields.description|default('')|trim }}
    {%- endfor %}
    {{- '", "parameters": ' }}{{- tool.parameters|tojson }}{{- "}" }}
{%- endfor %}"""

CONTENT_PARTS = """{%- for message in messages %}
{{- '<|' + message['role'] + '|>' }}
{%- if message['content'] is string %}
    {{- message['content'] }}
{%- else %}
    {%- for content in message['content'] %}
        {%- if content['type'] == 'image' %}{{- '<|image|>' }}
        {%- elif content['type'] == 'text' %}{{- content['text'] | trim }}{% if not loop.last %} {% endif %}
        {%- endif %}
    {%- endfor %}
    {{- '[' ~ message['content']|selectattr('type', 'equalto', 'text')|map(attribute='text')|map('trim')|join('+') ~ ']' }}
{%- endif %}
{{- '<|eot|>\\n' }}
{%- endfor %}"""

FEATURES = [
    # output and literals
    ("text", "plain text", {}),
    ("print_int", "{{ 42 }} {{ -7 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }}", {}),
    ("print_float", "{{ 1.5 }} {{ 2.0 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 0.1 + 0.2 }} {{ 1e300 * 1e300 }} {{ -0.0 }}", {}),
    # literals longer than a fixed buffer: cut at 127 characters they changed value
    ("print_float_long", "{{ 0." + "0" * 130 + "1 }} {{ 1" + "0" * 200 + ".5 }} {{ 1_0.2_5 }}", {}),
    ("print_consts", "{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", {}),
    ("print_strings", "{{ 'a' 'b' \"c\" }} {{ '\\n\\t\\\\\\'\\x41\\u00e9\\U0001F600' }}", {}),
    ("print_list", "{{ [1, 'two', 3.0, none, true, [], {}] }}", {}),
    ("print_tuple", "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ 1, 2 }}", {}),
    ("print_dict", "{{ {'a': 1, 'b': [1, 2], 'c': {'d': none}} }}", {}),
    ("print_repr_escapes", "{{ [x] }}", {"x": "it's \"q\" \\ \n\t\x01\x7f\u00a0\u00e9\u2028😀"}),
    ("print_repr_quote_choice", "{{ [a, b, c] }}", {"a": "it's", "b": "say \"hi\"", "c": "both ' and \""}),
    ("print_undefined", "[{{ missing }}]", {}),
    ("print_json_values", "{{ v }}", {"v": {"i": 1, "f": 2.5, "b": False, "n": None, "s": "x", "l": [1.0]}}),
    # whitespace control
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("lstrip_blocks", "line\n    {% if true %}\n    inside\n    {% endif %}\nafter", {}),
    ("strip_minus", "a   {{- 'b' -}}   c\n  {%- if true -%}  d  {%- endif -%}  e", {}),
    ("strip_plus", "x\n    {%+ if true %}y{% endif %}\n", {}),
    ("var_no_trim", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("comment", "a {# comment #} b\n  {# own line #}\nc {#- strip -#} d", {}),
    ("trailing_newline", "text\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}!", {}),
    ("raw_strip", "  {%- raw -%}  x  {%- endraw -%}  y", {}),
    ("tabs_lstrip", "\t\t{% if true %}t{% endif %}\n", {}),
    ("nbsp_not_lstrip_var", "  {{ 'v' }}  \n  {% set x = 1 %}  z", {}),
    # operators
    ("arith", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}", {}),
    ("arith_float", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }} {{ 1 / 3 }} {{ 10 / 4 }}", {}),
    ("unary_pow", "{{ -2 ** 2 }} {{ 2 ** 3 ** 2 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ missing }}", {}),
    ("concat_precedence", "{{ 1 ~ 2 }}{{ 'x' + 'y' ~ 'z' }}", {}),
    ("str_mul", "{{ 'ab' * 3 }} {{ 3 * 'c' }} {{ [1] * 2 }} {{ 'x' * 0 }}", {}),
    ("list_add", "{{ [1] + [2, 3] }} {{ (1,) + (2,) }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("eq_types", "{{ true == 1 }} {{ (1, 2) == [1, 2] }} {{ none == none }} {{ {'a': 1} == {'a': 1} }} {{ 'a' == 1 }}", {}),
    ("in_ops", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ '' in 'x' }} {{ 'x' in missing }}", {}),
    ("logic", "{{ true and 'x' }} {{ 0 or 'y' }} {{ not 0 }} {{ none or [] }} {{ not (1 and 0) }}", {}),
    ("cond_expr", "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}]", {}),
    ("cond_chain", "{{ 'a' if x == 1 else 'b' if x == 2 else 'c' }}", {"x": 2}),
    # variables and scoping
    ("set", "{% set x = 5 %}{{ x }}{% set x = x + 1 %}{{ x }}", {}),
    ("set_tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ c }}{{ d }}", {}),
    ("set_block", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]", {}),
    ("set_block_filter", "{% set x | upper %}shout{% endset %}{{ x }}", {}),
    ("set_in_if", "{% if true %}{% set a = 1 %}{% endif %}{{ a }}", {}),
    ("set_in_for_no_leak", "{% set a = 0 %}{% for i in [1, 2] %}{% set a = i %}{% endfor %}{{ a }}", {}),
    ("for_scope_reset", "{% set c = 'o' %}{% for m in [1, 2] %}[{{ c }}]{% set c = m %}{% endfor %}{{ c }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns }}", {}),
    ("namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c }}", {}),
    ("with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("shadow_var", "{% set messages = messages[1:] %}{{ messages|length }}", {"messages": [{"r": 1}, {"r": 2}]}),
    # loops
    ("for_basic", "{% for x in [1, 2, 3] %}{{ x }},{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("for_dict", "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("for_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"x": 1, "y": [2]}}),
    ("for_unpack_list", "{% for a, b in [[1, 2], [3, 4]] %}{{ a * b }} {% endfor %}", {}),
    ("for_nested_loop", "{% for i in [1, 2] %}{% set outer = loop %}{% for j in [1, 2] %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("for_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("for_undefined", "[{% for x in missing %}x{% endfor %}]", {}),
    ("for_reversed_slice", "{% for m in msgs[::-1] %}{{ m }}{% endfor %}", {"msgs": [1, 2, 3]}),
    ("range_variants", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}", {}),
    # if
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %} {% endfor %}", {}),
    ("if_truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{% if v %}T{% else %}F{% endif %}{% endfor %}", {}),
    # attribute and item access
    ("getattr_dict", "{{ d.a }} {{ d['a'] }} {{ d.missing }}|{{ d['b'].c }} {{ d.b['c'] }}", {"d": {"a": 1, "b": {"c": 2}}}),
    ("getattr_method_shadow", "{{ d['items'] }} {{ d.get('items') }}", {"d": {"items": "val"}}),
    ("getitem_list", "{{ l[0] }} {{ l[-1] }} {{ l.1 }} [{{ l[10] }}]", {"l": ["a", "b", "c"]}),
    ("getitem_str", "{{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[::2] }} {{ s|length }}", {"s": "héllo😀"}),
    ("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[1:10:2] }} {{ l[5:] }} {{ l[::-2] }}", {"l": [0, 1, 2, 3, 4]}),
    ("none_attr", "[{{ n.x }}]", {"n": None}),
    # string methods
    ("str_startswith", "{{ s.startswith('ab') }} {{ s.endswith('yz') }} {{ s.startswith(('x', 'a')) }} {{ s.startswith('b', 1) }}", {"s": "abcxyz"}),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ ''.split(',') }} {{ '  x y  '.split(none, 1) }} {{ '  x y  '.rsplit(none, 1) }}", {}),
    ("str_strip", "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\\n\\nx\\n'.strip('\\n') }}]", {"s": " \t\u00a0 pad \u3000\n"}),
    ("str_case", "{{ 'hello World'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'AbC'.swapcase() }} {{ \"they're bill's\".title() }}", {}),
    ("str_case_unicode", "{{ s.upper() }} {{ s.lower() }} {{ s|upper }} {{ s|title }}", {"s": "émile ÇA straße ΑΒΓ δεζ Привет"}),
    ("str_replace", "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }}", {}),
    ("str_find", "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'héllo'.find('l') }} {{ 'hello'.index('e') }}", {}),
    ("str_search_long", "{{ h.find(nd) }} {{ h.rfind(nd) }} {{ h.count(nd) }} {{ h.rfind(nd, 0, 100) }} {{ h.rfind(nd, 90) }} {{ h.rindex(nd) }} {{ h.rsplit(nd) }} {{ h.rsplit(nd, 1) }} {{ h.split(nd) }} {{ (nd ~ 'q') in h }} {{ h.rfind('ba' * 9) }} {{ h.find('ba' * 9, 5) }} {{ h.rfind('ba' * 9, 3, 40) }} {{ h.rfind(h) }} {{ h.rfind(h ~ 'a') }}", {"h": "ab" * 40 + "X" + "ab" * 40 + "X" + "ab" * 10, "nd": "ab" * 20 + "X"}),
    ("str_strip_set", "[{{ s.strip('\u00e9a-\u00df') }}] [{{ s.lstrip('a\u00e9') }}] [{{ s.rstrip('\u00dfz-') }}] [{{ s|trim('\u00e9a\u00dfz-') }}] [{{ s.strip('') }}]", {"s": "\u00e9a\u00e9-mid-\u00dfz-\u00df"}),
    ("repeat_empty", "[{{ '' * 10**15 }}] {{ [] * 10**15 }} [{{ 10**15 * '' }}] {{ 'ab' * 3 }} {{ [1] * 0 }} [{{ 'x' * 0 * 3333333333333333 }}]", {}),
    ("str_join", "{{ ', '.join(['a', 'b']) }} {{ '-'.join('xyz') }}", {}),
    ("str_misc", "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'x'.center(5, '*') }} {{ '42'.zfill(5) }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ '  '.isspace() }}", {}),
    # filters
    ("f_trim", "[{{ '  x  '|trim }}] [{{ 'xxyxx'|trim('x') }}] [{{ missing|trim }}] [{{ 5|trim }}]", {}),
    ("f_length", "{{ [1, 2]|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }} {{ missing|length }}", {}),
    ("f_tojson", "{{ v|tojson }}", {"v": {"s": "<&'>\"\\\n\t\u00e9😀\x01", "f": [1.0, 0.1, 1e-07, 1e+20, -0.0], "b": [True, False, None], "n": {}, "l": []}}),
    ("f_tojson_indent", "{{ v|tojson(indent=2) }}|{{ v|tojson(indent='\\t') }}|{{ [[]]|tojson(indent=4) }}", {"v": {"a": [1, {"b": 2}], "c": {}}}),
    ("f_tojson_opts", "{{ v|tojson(sort_keys=true) }} {{ v|tojson(separators=(',', ':')) }} {{ v|tojson(ensure_ascii=true) }}", {"v": {"b": "é😀", "a": 1}}),
    ("f_tojson_tuple_keys", "{{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }} {{ (1, 2)|tojson }} {{ 'x'|tojson }}", {}),
    ("f_string_case", "{{ 'Hi There'|lower }} {{ 'hi'|upper }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x)'|title }} {{ 42|string ~ '!' }}", {}),
    ("f_join", "{{ [1, 2, 3]|join }} {{ ['a', 'b']|join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}]|join('/', attribute='n') }}", {}),
    ("f_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]", {}),
    ("f_default", "{{ missing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }} [{{ missing|default }}]", {}),
    ("f_items", "{{ {'a': 1, 'b': 2}|items|list }} {% for k, v in {'x': 9}|items %}{{ k }}{{ v }}{% endfor %} {{ missing|items|list }}", {}),
    ("f_list", "{{ 'abc'|list }} {{ {'a': 1}|list }} {{ (1, 2)|list }}", {}),
    ("f_selectattr", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]}),
    ("f_selectattr_truthy", "{{ items|selectattr('on')|map(attribute='n')|join }}", {"items": [{"on": True, "n": 1}, {"on": False, "n": 2}, {"on": 1, "n": 3}]}),
    ("f_select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }} {{ ['a', 'code_interpreter']|reject('equalto', 'code_interpreter')|join(', ') }}", {}),
    ("f_map", "{{ ['a', 'b']|map('upper')|list }} {{ [{'x': {'y': 1}}, {}]|map(attribute='x.y', default=0)|list }} {{ [[1, 2], [3]]|map('length')|list }} {{ [[1, 2]]|map(attribute='0')|list }}", {}),
    ("f_replace", "{{ 'hello'|replace('l', 'L') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 12321|replace(2, 'x') }}", {}),
    ("f_int_float", "{{ '12'|int }} {{ '1.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 1.9|int }} {{ ' 42 '|int }} {{ '0x1A'|int(0, 16) }} {{ '3'|float }} {{ 'y'|float }} {{ true|int }}", {}),
    ("f_round", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 5|round }} {{ 1.234|round(1, 'ceil') }} {{ 1.29|round(1, 'floor') }} {{ 1234|round(-2) }}", {}),
    ("f_abs", "{{ -3|abs }} {{ (-3)|abs }} {{ -2.5|abs }}", {}),
    ("f_reverse", "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {% for x in [1, 2]|reverse %}{{ x }}{% endfor %}", {}),
    ("f_sort", "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [{'n': 2}, {'n': 1}]|sort(attribute='n')|map(attribute='n')|list }}", {}),
    ("f_unique", "{{ [1, 2, 1, 3, 2]|unique|list }} {{ ['a', 'A', 'b']|unique|list }}", {}),
    ("f_dictsort", "{{ {'b': 1, 'a': 2, 'C': 0}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}", {}),
    ("f_sum_min_max", "{{ [1, 2, 3]|sum }} {{ [{'v': 1}, {'v': 4}]|sum(attribute='v') }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} [{{ []|max }}]", {}),
    ("f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}", {}),
    ("f_center_escape", "[{{ 'ab'|center(6) }}] {{ '<a href=\"x\">&\\'</a>'|e }} {{ 'x'|safe }}", {}),
    ("f_wordcount_attr", "{{ 'hello big world'|wordcount }} {{ {'a': 1}|attr('a') }}|{{ 'abc'|attr('upper') is defined }}", {}),
    ("f_chain_call", "{{ messages|selectattr('role', 'equalto', 'system')|list|length }}", {"messages": [{"role": "system"}, {"role": "user"}]}),
    ("f_filter_block", "{% filter upper %}quiet {{ 'words' }}{% endfilter %}", {}),
    ("gen_truthy", "{% if []|select %}T{% else %}F{% endif %}{% if []|list %}T{% else %}F{% endif %}", {}),
    # tests
    ("t_defined", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ d.k is defined }} {{ d.z is defined }} {{ x is not defined }}", {"x": 1, "d": {"k": None}}),
    ("t_types", "{{ 'a' is string }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ none is none }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is iterable }} {{ 'a' is iterable }} {{ missing is iterable }}", {}),
    ("t_values", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 1 is eq 2 }} {{ 2 is gt 1 }} {{ 1 is lt(2) }} {{ 'a' is in 'abc' }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ range is callable }} {{ 'x' is callable }}", {}),
    ("t_not_chain", "{{ x is not none and x is not string }} {{ not x is none }}", {"x": 5}),
    ("t_sameas", "{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas 1 }}", {}),
    # macros and calls
    ("macro_basic", "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet(name='C') }}", {}),
    ("macro_scope", "{% set g = 'global' %}{% macro m(x) %}{% set g = 'local' %}{{ x }}{{ g }}{% endmacro %}{{ m(1) }}{{ g }}", {}),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}", {}),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}", {}),
    ("macro_default_ref", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", {}),
    ("dict_global", "{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }}", {}),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S %a %A %b %B %j %p %I %y %%') }}", {"strftime_now": "2024-07-26T15:04:05"}),
    ("strftime_c", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%c|%x|%X|%U|%W|%w|%e') }}", {"strftime_now": "2025-01-05T09:08:07"}),
    ("generation_tag", "a{% generation %}{% set x = 1 %}gen{{ x }}{% endgeneration %}b[{{ x }}]", {}),
    ("print_tag", "{% print 'printed' %}", {}),
    ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }} {{ d.items()|list }} {{ d.keys() }}", {"d": {"a": 1, "b": 2}}),
    ("list_methods", "{{ l.index(2) }} {{ l.count(1) }}", {"l": [1, 2, 1]}),
    ("messages_loop", "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "add_generation_prompt": True}),
    ("nested_data", "{{ data.a[1].b }} {{ data['a'][0] }}", {"data": {"a": [1, {"b": "deep"}]}}),
    ("big_int_ops", "{{ 9223372036854775807 }} {{ -9223372036854775807 - 1 }}", {}),
    # constructs in the style of other published chat templates
    ("tpl_alternating", MISTRAL_LIKE, {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}], "bos_token": "<s>", "eos_token": "</s>"}),
    ("err_tpl_alternating", MISTRAL_LIKE, {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "bos_token": "<s>", "eos_token": "</s>"}),
    ("tpl_gemma_like", GEMMA_LIKE, {"messages": [{"role": "user", "content": "  hi  "}, {"role": "assistant", "content": "yo\n"}], "add_generation_prompt": True, "bos_token": "<bos>"}),
    ("err_tpl_gemma_system", GEMMA_LIKE, {"messages": [{"role": "system", "content": "s"}], "bos_token": "<bos>"}),
    ("tpl_deepseek_like", DEEPSEEK_LIKE, {"messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>hidden</think>answer", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
            {"type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"},
        {"role": "assistant", "content": "final"}, {"role": "user", "content": "q2"}],
        "add_generation_prompt": True, "bos_token": "<bos>"}),
    ("tpl_hermes_tools", HERMES_LIKE, {"tools": [
        {"type": "function", "function": {"name": "get_stock", "description": "Get a stock price.\n  ",
         "parameters": {"type": "object", "properties": {
             "symbol": {"type": "string", "description": "Ticker "},
             "days": {"type": "array", "items": {"type": "integer"}},
             "opts": {"type": "object", "additionalProperties": {"type": "number"}},
             "mode": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
             "required": ["symbol"]}, "return": {"type": "number"}}}]}),
    ("tpl_content_parts", CONTENT_PARTS, {"messages": [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " describe  "}]},
        {"role": "assistant", "content": "a cat"},
        {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "text", "text": "more"}]}]}),
    ("tpl_chatml_generation", "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}", {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}),
    # errors (the C side must fail too)
    ("err_raise", "{{ raise_exception('custom failure') }}", {}),
    ("err_undefined_attr", "{{ missing.attr }}", {}),
    ("err_undefined_add", "{{ missing + 1 }}", {}),
    ("err_type_add", "{{ 'a' + 1 }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}", {}),
    ("err_none_iter", "{% for x in none %}{% endfor %}", {}),
    ("err_unsafe", "{{ [].append(1) }}", {}),
    ("err_unsafe_dict", "{{ {}.update({'a': 1}) }}", {}),
    ("err_range_big", "{{ range(200000)|length }}", {}),
    ("err_cmp_types", "{{ 1 < 'a' }}", {}),
    ("err_tojson_undefined", "{{ missing|tojson }}", {}),
    ("err_call_undefined", "{{ nothing() }}", {}),
    ("err_ns_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("err_unpack", "{% set a, b = [1] %}", {}),
    ("err_length_int", "{{ 5|length }}", {}),
    ("err_in_none", "{{ 'x' in none }}", {}),
    ("err_cond_false_attr", "{{ (1 if false).x }}", {}),
    ("err_macro_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("err_syntax_unclosed", "{% if true %}never closed", {}),
    ("err_syntax_unknown_tag", "{% frobnicate %}", {}),
    ("err_syntax_bad_expr", "{{ 1 + }}", {}),
    ("err_syntax_unknown_filter", "{{ 1|nosuchfilter }}", {}),
    ("err_syntax_unknown_test", "{{ 1 is nosuchtest }}", {}),
    ("err_syntax_endfor", "{% endfor %}", {}),
    ("err_syntax_unterminated_string", "{{ 'abc }}", {}),
    ("err_syntax_bracket", "{{ (1 + 2 }}", {}),
    ("err_syntax_unclosed_var", "{{ 1 ", {}),
    ("err_syntax_comment", "{# never closed", {}),
    ("err_syntax_break_outside", "{% break %}", {}),
    ("err_syntax_chained_is", "{{ 1 is odd is even }}", {}),
    ("err_syntax_assign_const", "{% set true = 1 %}", {}),
]


def make_features():
    out = []
    for name, source, variables in FEATURES:
        variables = dict(variables)
        messages = variables.pop("messages", [])
        agp = variables.pop("add_generation_prompt", False)
        result, err = render(source, copy.deepcopy(messages), agp, copy.deepcopy(variables))
        rec = {"name": name, "template": source, "messages": messages, "add_generation_prompt": agp,
               "extra": variables}
        if err:
            rec["error"] = err
        else:
            rec["expected"] = result
        if name.startswith("err_") != (err is not None):
            sys.exit("feature %s: expected %s, Jinja2 gave %r" % (name, "an error" if name.startswith("err_") else "output", err or result))
        out.append(rec)
    return out


# ---- generated differential suite -------------------------------------------------------------
GEN_VARS = {
    "s": "Hello, World é😀", "t": "  padded\ttext \n", "e": "", "n": 7, "z": 0, "m": -3, "f": 2.5,
    "g": 1e-05, "b": True, "k": False, "o": None,
    "l": [3, 1, 2], "w": ["b", "A", "a", "c"], "x": [], "mixed": [1, "a", None, 2.5, True],
    "d": {"a": 1, "b": "two", "c": [1, 2], "items": "shadow"}, "q": {},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "<think>r</think>ok", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]}],
    "nested": {"a": {"b": {"c": [10, 20, {"d": "deep"}]}}},
}

GEN_ATOMS = ["s", "t", "e", "n", "z", "m", "f", "g", "b", "k", "o", "l", "w", "x", "mixed", "d", "q",
             "msgs", "nested", "u", "0", "1", "-2", "3", "0.5", "1e3", "'abc'", "'a b'", "''",
             "'É'", "'x,y,,z'", "\"q'uote\"", "none", "true", "false", "[1, 2]", "['a', 'b']",
             "{'k': 'v'}", "(1, 'a')", "msgs[0]", "msgs[-1]", "d.a", "d['c']", "nested.a.b.c",
             "l[0]", "s[1:4]", "s[::-1]", "l[::-1]", "w[1:]", "msgs|length", "range(4)", "u.v"]

GEN_FILTERS = ["length", "trim", "upper", "lower", "first", "last", "list", "join(',')", "tojson",
               "string", "default('D')", "default('D', true)", "int", "float", "round", "abs",
               "reverse|list", "sort", "unique|list", "items|list", "dictsort", "map('string')|list",
               "select('odd')|list", "reject|list", "selectattr('role', 'equalto', 'user')|list",
               "map(attribute='role')|list", "replace('a', 'X')", "capitalize", "title",
               "indent(2)", "sum", "min", "max", "count", "wordcount", "center(9)", "e",
               "tojson(indent=1)", "join", "batch" if False else "string", "trim('H')"]

GEN_TESTS = ["defined", "undefined", "none", "string", "number", "iterable", "mapping", "sequence",
             "odd", "even", "divisibleby(3)", "eq 1", "in [1, 'a']", "lower", "upper", "true",
             "false", "integer", "float", "boolean", "not none", "not defined", "callable"]

GEN_METHODS = ["upper()", "lower()", "strip()", "lstrip('H')", "rstrip()", "split(',')", "split()",
               "startswith('H')", "endswith('😀')", "replace('l', 'L')", "find('o')", "count('l')",
               "title()", "capitalize()", "get('a')", "get('zz', 5)", "items()|list", "keys()|list",
               "values()|list", "index(1)", "splitlines()", "rsplit(' ', 1)", "isdigit()", "join(['p', 'q'])"]

GEN_BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in",
              "not in", "and", "or"]


def gen_expr(rng, depth):
    r = rng.random()
    if depth <= 0 or r < 0.25:
        return rng.choice(GEN_ATOMS)
    if r < 0.45:
        return "%s|%s" % (gen_expr(rng, depth - 1), rng.choice(GEN_FILTERS))
    if r < 0.55:
        return "%s is %s" % (gen_expr(rng, depth - 1), rng.choice(GEN_TESTS))
    if r < 0.65:
        return "%s.%s" % (rng.choice(["s", "t", "d", "l", "q", "e", "'a,b'", "msgs[0]", "w", "u"]), rng.choice(GEN_METHODS))
    if r < 0.85:
        return "(%s %s %s)" % (gen_expr(rng, depth - 1), rng.choice(GEN_BINOPS), gen_expr(rng, depth - 1))
    if r < 0.92:
        return "(%s if %s else %s)" % (gen_expr(rng, depth - 1), gen_expr(rng, depth - 1), gen_expr(rng, depth - 1))
    return "%s%s" % (rng.choice(["not ", "-", "not not "]), gen_expr(rng, depth - 1))


GEN_TEXT = ["", " ", "\n", "  \n  ", "\t", "x", "\n\n", " y \n", "\n  ", "z\n\t"]


def gen_tag(rng, body):
    left = rng.choice(["", "", "-", "+"])
    right = rng.choice(["", "", "-", "+"])
    return "{%" + left + " " + body + " " + right + "%}"


def gen_layout(rng, depth):
    """Text interleaved with tags in every whitespace-control combination."""
    out = []
    for _ in range(rng.randint(1, 5)):
        out.append(rng.choice(GEN_TEXT))
        r = rng.random()
        if r < 0.25:
            out.append("{{" + rng.choice(["", "-"]) + " n " + rng.choice(["", "-"]) + "}}")
        elif r < 0.4:
            out.append("{#" + rng.choice(["", "-", "+"]) + " c " + rng.choice(["", "-", "+"]) + "#}")
        elif r < 0.6 and depth > 0:
            out.append(gen_tag(rng, "if b"))
            out.append(gen_layout(rng, depth - 1))
            if rng.random() < 0.5:
                out.append(gen_tag(rng, "else"))
                out.append(gen_layout(rng, depth - 1))
            out.append(gen_tag(rng, "endif"))
        elif r < 0.75 and depth > 0:
            out.append(gen_tag(rng, "for i in l"))
            out.append(gen_layout(rng, depth - 1))
            out.append(gen_tag(rng, "endfor"))
        elif r < 0.85:
            out.append(gen_tag(rng, "set v = 1"))
        elif r < 0.9:
            out.append(gen_tag(rng, "raw") + rng.choice(GEN_TEXT) + "{{ x }}" + gen_tag(rng, "endraw"))
        out.append(rng.choice(GEN_TEXT))
    return "".join(out)


# Python object reprs with addresses, and complex numbers, which weft does not have (see
# docs/CHAT_TEMPLATES.md); generated cases that print one are left out.
UNMATCHABLE = (" at 0x", "j)", "<generator", "<list_reverseiterator", "<built-in", "<bound method",
               "<dict_", "<function", "<Macro", "<jinja2", "object at")


PROG_VALUES = ["l", "w", "msgs", "s", "d", "x", "range(3)", "[1, 2, 3, 4]", "mixed", "'ab'",
               "d.items()", "msgs|selectattr('role', 'ne', 'system')"]
PROG_EXPRS = ["it", "y", "ns.a", "loop.index", "loop.first", "loop.last", "loop.length",
              "loop.previtem", "loop.revindex0", "n", "it ~ y", "ns.a + 1", "y is defined",
              "mk(it)", "mk(y, 'q')", "it is string", "loop.index0 % 2", "(it|string)[:3]",
              "'%s-%d' % (it|string, loop.index)", "ns.b|length"]


def gen_program(rng, depth, in_loop):
    """Statements mixing loops, sets, namespaces and macro calls, to exercise scoping."""
    out = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.3 and depth > 0:
            out.append("{%% for it in %s %%}" % rng.choice(PROG_VALUES))
            out.append(gen_program(rng, depth - 1, True))
            if rng.random() < 0.2:
                out.append("{% else %}E")
            out.append("{% endfor %}")
        elif r < 0.5 and depth > 0:
            out.append("{%% if %s %%}" % rng.choice(PROG_EXPRS + ["true", "false"]))
            out.append(gen_program(rng, depth - 1, in_loop))
            if rng.random() < 0.5:
                out.append("{% elif " + rng.choice(PROG_EXPRS) + " %}")
                out.append(gen_program(rng, depth - 1, in_loop))
            out.append("{% endif %}")
        elif r < 0.6:
            out.append("{%% set y = %s %%}" % rng.choice(PROG_EXPRS))
        elif r < 0.7:
            out.append("{%% set ns.a = %s %%}" % rng.choice(PROG_EXPRS))
        elif r < 0.75:
            out.append("{%% set ns.b = ns.b ~ %s %%}" % rng.choice(PROG_EXPRS))
        elif r < 0.8 and in_loop:
            out.append(rng.choice(["{% break %}", "{% continue %}", "{% if loop.index > 1 %}{% break %}{% endif %}"]))
        elif r < 0.85:
            out.append("{%% set blk %%}<{{ %s }}>{%% set y = 'inner' %%}{%% endset %%}{{ blk }}" % rng.choice(PROG_EXPRS))
        else:
            out.append("[{{ %s }}]" % rng.choice(PROG_EXPRS))
    return "".join(out)


def make_programs():
    rng = random.Random(4242)
    out = []
    prelude = ("{% set ns = namespace(a=0, b='') %}{% set y = 'top' %}"
               "{% macro mk(v, suffix='!') %}({{ v }}{{ suffix }}{{ y }}){% set y = 'm' %}{% endmacro %}")
    for i in range(800):
        src = prelude + gen_program(rng, 3, False) + "|{{ y }}|{{ ns.a }}|{{ ns.b }}"
        result, err = render(src, [], False, copy.deepcopy(GEN_VARS))
        if result is not None and any(m in result for m in UNMATCHABLE):
            continue
        rec = {"name": "prog%04d" % i, "template": src, "messages": [], "add_generation_prompt": False,
               "extra": "GEN_VARS"}
        if err:
            rec["error"] = err
        else:
            rec["expected"] = result
        out.append(rec)
    return out


class ComplexProbe(ImmutableSandboxedEnvironment):
    """Flags templates whose ** yields a complex number (weft has no complex type)."""

    intercepted_binops = frozenset(["**"])
    seen_complex = False

    def call_binop(self, context, operator, left, right):
        r = super().call_binop(context, operator, left, right)
        if isinstance(r, complex):
            ComplexProbe.seen_complex = True
        return r


def makes_complex(src):
    ComplexProbe.seen_complex = False
    try:
        ComplexProbe(extensions=[jinja2.ext.loopcontrols]).from_string(src).render(**copy.deepcopy(GEN_VARS))
    except Exception:
        pass
    return ComplexProbe.seen_complex


def make_generated():
    rng = random.Random(777)
    out, skipped = [], 0
    for i in range(2200):
        r = rng.random()
        if r < 0.5:
            src = "{{ " + gen_expr(rng, 3) + " }}"
        elif r < 0.65:
            src = "{% if " + gen_expr(rng, 2) + " %}T{% else %}F{% endif %}"
        elif r < 0.75:
            src = "{% for it in " + gen_expr(rng, 2) + " %}[{{ it }}|{{ loop.index }}]{% else %}none{% endfor %}"
        else:
            src = gen_layout(rng, 2)
        # deep copies: Jinja2's indent filter extends a list argument in place (s += "\n")
        result, err = render(src, [], False, copy.deepcopy(GEN_VARS))
        if (result is not None and any(m in result for m in UNMATCHABLE)) or ("**" in src and makes_complex(src)):
            skipped += 1
            continue
        rec = {"name": "gen%04d" % i, "template": src, "messages": [], "add_generation_prompt": False,
               "extra": "GEN_VARS"}
        if err:
            rec["error"] = err
        else:
            rec["expected"] = result
        out.append(rec)
    return out, skipped


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n")


def main():
    print("jinja2", jinja2.__version__)
    feats = make_features()
    write_jsonl(os.path.join(OUT, "features.jsonl"), feats)
    gen, skipped = make_generated()
    progs = make_programs()
    print("programs:", len(progs), "kept,", sum(1 for g in progs if "error" in g), "errors")
    gen += progs
    # the shared variables go first, once, instead of in every record
    write_jsonl(os.path.join(OUT, "generated.jsonl"), [{"name": "GEN_VARS", "vars": GEN_VARS}] + gen)
    print("generated:", len(gen), "kept,", skipped, "left out (unmatchable reprs)",
          sum(1 for g in gen if "error" in g), "errors")
    cases = make_cases()
    write_jsonl(os.path.join(OUT, "cases.jsonl"), cases)
    kinds = {}
    for c in cases:
        key = (c["template"], "error" if "error" in c else "ok")
        kinds[key] = kinds.get(key, 0) + 1
    print("features:", len(feats), "cases:", len(cases), sorted(kinds.items()))


if __name__ == "__main__":
    main()
