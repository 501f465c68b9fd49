"""IncrementalDetokenizer, apply_chat_template and find_stop, on small tokenizers built here."""
from __future__ import annotations

from itertools import accumulate

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from engine.byte_text import ByteLevelDetokenizer, cut_character, is_byte_level, token_bytes
from engine.detokenizer import (IncrementalDetokenizer, apply_chat_template, detokenizer_for, find_stop,
                                 rust_decode)

FFFD = "\ufffd"

CORPUS = [
    "hello world, héllo wörld! the quick brown fox jumps over the lazy dog.",
    "日本語のテキストです。日本語 日本 本語 naïve café résumé",
    "rocket 🚀🚀 family 👨‍👩‍👧‍👦 flag 🇯🇵 thumbs 👍🏽 sparkle ✨",
    "Привет мир, γειά σου κόσμε, مرحبا بالعالم",
    "    def f(x):\n        return x + 1\n",
]
SPECIALS = ["<|eos|>", "<|im_start|>", "<|im_end|>"]


def _byte_level_tokenizer(vocab_size: int = 420) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|eos|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])


@pytest.fixture(scope="module")
def tok():
    return _byte_level_tokenizer()


@pytest.fixture(scope="module")
def byte_tokens(tok):
    """Id of each single-byte token (the ByteLevel alphabet)."""
    to_byte = {c: b for b, c in _bytes_to_unicode().items()}
    vocab = tok.get_vocab()
    return {to_byte[t]: i for t, i in vocab.items() if len(t) == 1 and t in to_byte}


def _bytes_to_unicode() -> dict[int, str]:
    # The GPT-2 byte <-> printable character table that ByteLevel uses.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _stream(tok, prompt_ids, output_ids, **kw):
    detok = IncrementalDetokenizer(tok, prompt_ids, **kw)
    deltas = [detok.push(t) for t in output_ids]
    tail = detok.finish()
    return detok, deltas, tail


def _check_stream(tok, prompt_ids, output_ids):
    detok, deltas, tail = _stream(tok, prompt_ids, output_ids)
    expected = tok.decode(output_ids, skip_special_tokens=True)
    assert "".join(deltas) + tail == expected
    assert detok.text == expected
    for d in deltas:
        assert FFFD not in d, (deltas, expected)
    return deltas


TEXTS = [
    "héllo 日本語 🚀 naïve",
    "👨‍👩‍👧‍👦👍🏽🇯🇵✨🚀",
    "日本語のテキスト",
    "plain ascii text, nothing special.",
    " leading space and trailing space ",
    "mixed: café 🚀 Привет κόσμε مرحبا 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\n\n  indented\n\tTabbed ✨\n",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("prompt", ["", "User: say something\nAssistant:", "日本"])
def test_stream_matches_full_decode(tok, text, prompt):
    output_ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(output_ids) == text
    _check_stream(tok, tok.encode(prompt, add_special_tokens=False), output_ids)


def test_split_characters_are_held_back(tok, byte_tokens):
    # 🚀 is F0 9F 9A 80: push it one byte token at a time.
    ids = [byte_tokens[b] for b in "a🚀b".encode()]
    detok, deltas, tail = _stream(tok, [], ids)
    assert deltas == ["a", "", "", "", "🚀", "b"]
    assert tail == ""
    assert detok.text == "a🚀b"


def test_finish_flushes_incomplete_character(tok, byte_tokens):
    ids = [byte_tokens[b] for b in "ok日".encode()[:-1]]  # 日 cut after 2 of 3 bytes
    detok, deltas, tail = _stream(tok, [], ids)
    assert "".join(deltas) == "ok"
    assert tail == tok.decode(ids)[2:]
    assert tail.startswith(FFFD)
    assert detok.text == tok.decode(ids)
    assert detok.finish() == ""  # nothing left


def test_incomplete_character_completes_after_more_bytes(tok, byte_tokens):
    text = "x日本語🚀y"
    ids = [byte_tokens[b] for b in text.encode()]
    deltas = _check_stream(tok, [], ids)
    assert [d for d in deltas if d] == list(text)


def test_special_tokens_are_skipped(tok):
    eos = tok.convert_tokens_to_ids("<|eos|>")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    body = tok.encode("héllo 🚀", add_special_tokens=False)
    ids = body[:2] + [im_end] + body[2:] + [eos]
    detok, deltas, tail = _stream(tok, [], ids)
    assert deltas[2] == "" and deltas[-1] == ""
    assert "".join(deltas) + tail == "héllo 🚀" == tok.decode(ids, skip_special_tokens=True)


def test_special_tokens_kept_when_not_skipped(tok):
    eos = tok.convert_tokens_to_ids("<|eos|>")
    ids = tok.encode("hi", add_special_tokens=False) + [eos]
    detok, deltas, tail = _stream(tok, [], ids, skip_special_tokens=False)
    assert deltas[-1] == "<|eos|>"
    assert detok.text == tok.decode(ids, skip_special_tokens=False)


def test_many_special_tokens_keep_window_short(tok):
    eos = tok.convert_tokens_to_ids("<|eos|>")
    detok = IncrementalDetokenizer(tok, [])
    for _ in range(200):
        assert detok.push(eos) == ""
    assert detok.push(tok.encode("a", add_special_tokens=False)[0]) == "a"
    assert len(detok._ids) < 20


def test_long_output_window_stays_small(tok):
    ids = tok.encode("héllo 日本語 🚀 naïve " * 100, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, tok.encode("prompt", add_special_tokens=False))
    for t in ids:
        detok.push(t)
        assert len(detok._ids) - detok._prefix_offset < 16
    assert detok.text + detok.finish() == tok.decode(ids)


def test_prompt_special_tokens_as_context(tok):
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    prompt = [im_start] + tok.encode("assistant\n", add_special_tokens=False)
    _check_stream(tok, prompt, tok.encode("日本語 ok", add_special_tokens=False))


def test_long_run_of_broken_bytes_does_not_stall(tok, byte_tokens):
    # Lead bytes that nothing completes: genuinely invalid output.
    ids = [byte_tokens[0xE6]] * 40 + [byte_tokens[ord("z")]]
    detok, deltas, tail = _stream(tok, [], ids)
    assert "".join(deltas) + tail == tok.decode(ids)
    assert detok.text.endswith("z")
    assert len(detok._ids) - detok._prefix_offset < 20


def test_chained_characters_across_tokens(tok, byte_tokens):
    # Each push ends inside a character for a long stretch; every character is
    # valid, so no delta may contain U+FFFD, and text must keep flowing.
    text = "日本語" * 12
    data = text.encode()
    ids = [byte_tokens[b] for b in data]
    deltas = _check_stream(tok, [], ids)
    assert sum(1 for d in deltas if d) == len(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40), prompt=st.text(max_size=10))
def test_random_unicode_roundtrip(tok, text, prompt):
    output_ids = tok.encode(text, add_special_tokens=False)
    _check_stream(tok, tok.encode(prompt, add_special_tokens=False), output_ids)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_token_ids(tok, data):
    """Arbitrary id sequences (any bytes, split anywhere, specials mixed in)."""
    ids = data.draw(st.lists(st.integers(0, len(tok) - 1), max_size=30))
    detok, deltas, tail = _stream(tok, [], ids)
    assert "".join(deltas) + tail == tok.decode(ids, skip_special_tokens=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.characters(min_codepoint=0x80, exclude_categories=("Cs",)), max_size=20))
def test_random_multibyte_as_single_bytes(tok, byte_tokens, text):
    ids = [byte_tokens[b] for b in text.encode()]
    _check_stream(tok, [], ids)


class _OwnDecode(PreTrainedTokenizerFast):
    """A tokenizer class with a decode of its own: the detokenizer must call it, not the Rust one."""

    def _decode(self, token_ids, **kwargs):
        return super()._decode(token_ids, **kwargs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_rust_decode_streams_what_the_tokenizers_own_decode_does(tok, data):
    """A fast tokenizer's windows go to its Rust decode (a third of the time a call); a class with a
    decode of its own keeps it; both stream the same deltas for any ids, specials and broken bytes."""
    own = _OwnDecode(tokenizer_object=tok.backend_tokenizer, eos_token="<|eos|>",
                     additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    assert rust_decode(tok) is not None and rust_decode(own) is None
    assert isinstance(detokenizer_for(own, []), IncrementalDetokenizer)  # its own decode: the window decoder
    ids = data.draw(st.lists(st.integers(0, len(tok) - 1), max_size=30))
    prompt = data.draw(st.lists(st.integers(0, len(tok) - 1), max_size=6))
    assert _stream(tok, prompt, ids)[1:] == _stream(own, prompt, ids)[1:]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_byte_table_streams_what_the_window_decoder_does(tok, byte_tokens, data):
    """A byte-level tokenizer's requests stream through its byte table (one lookup a token): for any ids
    (broken bytes, specials, ids past the vocabulary) the same text as the window decoder and the tokenizer's
    decode; wherever the bytes are valid UTF-8, never behind the window decoder after any token (a token
    that completes one character and starts the next shows the first at once, where the window decoder
    holds both; broken bytes become U+FFFD sooner)."""
    pieces = st.one_of(st.integers(0, len(tok) + 4), st.sampled_from(sorted(byte_tokens.values())))
    ids, prompt = data.draw(st.lists(pieces, max_size=40)), data.draw(st.text(max_size=6))
    prompt = tok.encode(prompt, add_special_tokens=False)  # whole characters
    cut = data.draw(st.booleans())  # or a prompt of any ids, that may end inside a character
    if cut:
        edges = [byte_tokens[b] for b in (0xE2, 0xF0, 0x82, 0x9F, 0xED, 0xA0, 0xBF)]  # (ED A0: a surrogate's)
        prompt = data.draw(st.lists(st.one_of(pieces.filter(lambda i: i < len(tok)), st.sampled_from(edges)),
                                    max_size=6))
    fast, window = detokenizer_for(tok, prompt), IncrementalDetokenizer(tok, prompt)
    assert isinstance(fast, ByteLevelDetokenizer)
    fast_deltas = [fast.push(t) for t in ids] + [fast.finish()]
    window_deltas = [window.push(t) for t in ids] + [window.finish()]
    whole = tok.decode(prompt + [i for i in ids if i < len(tok)], skip_special_tokens=True)
    assert "".join(fast_deltas) == fast.text == whole[len(tok.decode(prompt, skip_special_tokens=True)):]
    if not cut:  # (the window decoder looks back five prompt ids: it can miss a cut before skipped ones)
        assert fast.text == "".join(window_deltas)
    assert fast.num_tokens == window.num_tokens == len(ids)
    if FFFD not in fast.text:
        fast_so_far, window_so_far = list(accumulate(fast_deltas)), list(accumulate(window_deltas))
        assert all(f.startswith(w) for f, w in zip(fast_so_far, window_so_far))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40))
def test_the_byte_table_holds_a_character_until_its_last_byte(tok, byte_tokens, text):
    data = text.encode()
    detok = detokenizer_for(tok, [])
    assert isinstance(detok, ByteLevelDetokenizer)
    assert [detok.push(byte_tokens[b]) for b in data] == [_completed(data[:k + 1]) for k in range(len(data))]
    assert detok.finish() == "" and detok.text == text


def _completed(data: bytes) -> str:
    """The character that data's last byte completes, or "" while it is cut short."""
    try:
        whole = data.decode()
    except UnicodeDecodeError:
        return ""
    return whole[-1]


def test_special_tokens_kept_in_the_byte_table_when_not_skipped(tok):
    ids = [tok.convert_tokens_to_ids("<|im_start|>")] + tok.encode("héllo", add_special_tokens=False)
    detok = detokenizer_for(tok, [], skip_special_tokens=False)
    assert isinstance(detok, ByteLevelDetokenizer)
    assert "".join(detok.push(t) for t in ids) + detok.finish() == tok.decode(ids, skip_special_tokens=False)


def test_a_prompt_ending_inside_a_character_is_decoded_again_after_it(tok, byte_tokens):
    """The prompt's last byte starts "€" (E2 82 AC), whose other bytes come as output: the text those
    tokens decode to on their own is not the delta, which only adds what follows the prompt's text."""
    prompt, out = [byte_tokens[0xE2]], [byte_tokens[0x82], byte_tokens[0xAC], byte_tokens[ord("a")],
                                         byte_tokens[ord("b")]]
    for detok in detokenizer_for(tok, prompt), IncrementalDetokenizer(tok, prompt):
        assert [detok.push(t) for t in out] + [detok.finish()] == ["", "", "a", "b", ""]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")  # specials after the cut add no bytes: still cut
    assert cut_character(token_bytes(tok), prompt + [im_end] * 6) == b"\xe2"
    assert cut_character(token_bytes(tok), prompt + [byte_tokens[0x82], byte_tokens[0xAC], im_end]) == b""
    broken = detokenizer_for(tok, prompt)  # the prompt's character broken by the output: its U+FFFD is the prompt's
    assert [broken.push(byte_tokens[ord("a")]), broken.finish()] == ["a", ""]
    unfinished = detokenizer_for(tok, prompt)
    assert [unfinished.push(byte_tokens[0x82]), unfinished.finish()] == ["", ""]
    surrogate = [byte_tokens[0xED], byte_tokens[0xA0]]  # held by Python's decoder, two broken bytes to any other
    assert cut_character(token_bytes(tok), surrogate) == b""
    after = detokenizer_for(tok, surrogate)
    assert [after.push(byte_tokens[ord("a")]), after.finish()] == ["a", ""]


def test_metaspace_tokenizer_without_prompt_context():
    """SentencePiece-style: a decoder that strips the leading space of the whole string."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "</s>"], show_progress=False)
    tok.train_from_iterator(["hello world the quick brown fox"] * 4, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>")
    ids = hf.encode("hello world the fox", add_special_tokens=False)
    _check_stream(hf, [], ids)
    assert not is_byte_level(hf)  # its decode drops the first token's leading space: the window decoder
    assert isinstance(detokenizer_for(hf, ids), IncrementalDetokenizer)


# -- apply_chat_template ----------------------------------------------------

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n"
          "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}")


@pytest.fixture()
def chat_tok():
    t = _byte_level_tokenizer()
    t.chat_template = CHATML
    return t


def test_chat_template_returns_plain_ids(chat_tok):
    msgs = [{"role": "user", "content": "héllo 🚀"}]
    ids = apply_chat_template(chat_tok, msgs)
    assert isinstance(ids, list) and all(type(i) is int for i in ids)
    assert chat_tok.decode(ids) == "<|im_start|>user\nhéllo 🚀<|im_end|>\n<|im_start|>assistant\n"
    no_gen = apply_chat_template(chat_tok, msgs, add_generation_prompt=False)
    assert chat_tok.decode(no_gen) == "<|im_start|>user\nhéllo 🚀<|im_end|>\n"


def test_chat_template_passes_kwargs(chat_tok):
    msgs = [{"role": "user", "content": "hi"}]
    ids = apply_chat_template(chat_tok, msgs, enable_thinking=False)
    assert chat_tok.decode(ids).endswith("assistant\n<think></think>")


def test_chat_template_missing(tok):
    with pytest.raises(ValueError, match="no chat template"):
        apply_chat_template(tok, [{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("messages", [
    [],
    "hello",
    None,
    [{"role": "user"}],
    [{"content": "hi"}],
    [{"role": "user", "content": 3}],
    [{"role": 1, "content": "hi"}],
    ["user: hi"],
    {"role": "user", "content": "hi"},
])
def test_chat_template_malformed_messages(chat_tok, messages):
    with pytest.raises(ValueError, match="messages"):
        apply_chat_template(chat_tok, messages)


def test_chat_template_error_from_template(chat_tok):
    chat_tok.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(ValueError, match="roles must alternate"):
        apply_chat_template(chat_tok, [{"role": "user", "content": "hi"}])


# -- find_stop ----------------------------------------------------------------

def test_find_stop_basic():
    assert find_stop("hello world", ["wor"], 0) == 6
    assert find_stop("hello world", ["xyz"], 0) is None
    assert find_stop("hello world", [], 0) is None


def test_find_stop_earliest_of_several():
    assert find_stop("abc STOP def END", ["END", "STOP"], 0) == 4
    assert find_stop("xxENDyySTOP", ["STOP", "END"], 0) == 2


def test_find_stop_spanning_old_and_new_text():
    # "STOP" starts in text already checked (start=6) and ends in the new part.
    text = "abcdeST" + "OP more"
    assert find_stop(text, ["STOP"], 7) == 5


def test_find_stop_only_looks_near_new_text():
    # A stop wholly inside text checked long ago is not looked at again.
    text = "STOP" + "x" * 20 + "tail"
    assert find_stop(text, ["STOP"], 24) is None
    assert find_stop(text, ["STOP"], 0) == 0
    # The window starts at start - longest + 1, so shorter stops near it count.
    assert find_stop("ab.cd", ["long_stop", "."], 4) == 2


def test_find_stop_incremental_matches_full_search():
    stops = ["</s>", "\n\n", "END"]
    text = "some text\n then more END and </s> later"
    first = min(i for i in (text.find(s) for s in stops) if i != -1)
    found = None
    for end in range(1, len(text) + 1):
        found = find_stop(text[:end], stops, end - 1)
        if found is not None:
            break
    assert found == first
