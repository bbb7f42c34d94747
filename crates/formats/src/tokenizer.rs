//! Tokenizers built with the HF `tokenizers` crate, from GGUF metadata or from `tokenizer.json`,
//! and UTF-8-safe incremental decoding for streaming.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};
use tokenizers::{DecoderWrapper, NormalizerWrapper};

use crate::error::{FormatError, Result};
use crate::gguf::{Gguf, Value};

/// `tokenizer.ggml.token_type`, or "normal" for every token when the file has none.
fn token_types(g: &Gguf<'_>, n: usize) -> Result<Vec<u64>> {
    let types: Vec<u64> = match g.get("tokenizer.ggml.token_type") {
        Some(Value::Array(_, items)) => items.iter().map(|v| v.as_u64().unwrap_or(1)).collect(),
        _ => vec![1; n],
    };
    if types.len() != n {
        return Err(FormatError::Tokenizer(format!(
            "tokenizer.ggml.token_type has {} entries, tokenizer.ggml.tokens has {n}",
            types.len()
        )));
    }
    Ok(types)
}

/// GGUF token types (`tokenizer.ggml.token_type`) that are matched whole, before BPE.
const UNKNOWN: u64 = 2;
const CONTROL: u64 = 3;
const USER_DEFINED: u64 = 4;

/// GPT-2's pre-tokenizer regex, as llama.cpp and HF use it.
/// The pre-tokenizer rules mars has: how byte-level BPE splits text before merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreRule {
    /// GPT-2's split (contractions, letters, digits, punctuation, spaces), as HF's ByteLevel.
    Gpt2,
    /// GPT-2's split after each digit alone (SmolLM).
    SmolLm,
    /// Llama 3's split: digits in runs of up to three.
    Llama3,
    /// Qwen2's split: Llama 3's with each digit alone.
    Qwen2,
}

/// `tokenizer.ggml.pre` names and their rule: the names llama.cpp's vocabulary loader
/// (`llama-vocab.cpp`) maps to one of the four rules above, so a file llama.cpp reads is read
/// here (DeepSeek-R1's Qwen distills say `deepseek-r1-qwen`, Falcon 3 `falcon3`), plus the
/// names mars accepted before (`gpt2`).
pub const PRE_NAMES: &[(&str, PreRule)] = &[
    ("default", PreRule::Gpt2),
    ("gpt2", PreRule::Gpt2),
    ("gpt-2", PreRule::Gpt2),
    ("phi-2", PreRule::Gpt2),
    ("mellum", PreRule::Gpt2),
    ("exaone4", PreRule::Gpt2),
    ("smollm", PreRule::SmolLm),
    ("llama3", PreRule::Llama3),
    ("llama-v3", PreRule::Llama3),
    ("llama-bpe", PreRule::Llama3),
    ("falcon3", PreRule::Llama3),
    ("falcon-h1", PreRule::Llama3),
    ("pixtral", PreRule::Llama3),
    ("midm-2.0", PreRule::Llama3),
    ("lfm2", PreRule::Llama3),
    ("qwen2", PreRule::Qwen2),
    ("deepseek-r1-qwen", PreRule::Qwen2),
    ("kormo", PreRule::Qwen2),
    ("f2llmv2", PreRule::Qwen2),
    ("megrez", PreRule::Qwen2),
];

/// The rule of a `tokenizer.ggml.pre` name ([`PRE_NAMES`]), `None` for one mars lacks.
pub fn pre_rule(name: &str) -> Option<PreRule> {
    PRE_NAMES.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer with the special-token facts decoding needs.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Beginning-of-sequence id, if the model has one.
    pub bos: Option<u32>,
    /// End-of-sequence id.
    pub eos: Option<u32>,
    /// Whether a BOS is prepended to a prompt.
    pub add_bos: bool,
    /// Ids that end generation (EOS, end-of-turn and similar control tokens).
    pub stop_ids: Vec<u32>,
    /// SentencePiece prepends "▁" to the text; [`Tokenizer::decode`] removes that one space.
    strip_space_prefix: bool,
}

/// Registers the control and user-defined tokens as special, so that their text in a prompt
/// (`<|im_start|>`) maps to their id instead of being split.
fn add_special_tokens(inner: &mut tokenizers::Tokenizer, tokens: &[&str], types: &[u64]) {
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|(_, t)| **t == CONTROL || **t == USER_DEFINED)
        .map(|(s, _)| AddedToken::from(s.to_string(), true))
        .collect();
    inner.add_special_tokens(&special);
}

fn tok_err(e: impl std::fmt::Display) -> FormatError {
    FormatError::Tokenizer(e.to_string())
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.*`).
    ///
    /// Supported: `gpt2`-style byte-level BPE with the `default`/`gpt2`, `smollm`, `llama3`
    /// (`llama-bpe`) and `qwen2` pre-tokenizers.
    ///
    /// # Errors
    /// [`FormatError::MissingKey`] / [`FormatError::WrongType`] for absent or mistyped metadata,
    /// [`FormatError::Tokenizer`] for an unsupported model or pre-tokenizer (named), or a
    /// vocabulary the BPE builder rejects.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self> {
        let model = g.get_str("tokenizer.ggml.model")?;
        match model {
            "gpt2" => Self::byte_level_bpe(g),
            "llama" => Self::sentencepiece(g),
            _ => Err(FormatError::Tokenizer(format!(
                "tokenizer.ggml.model = {model:?} is not supported from GGUF metadata (supported: \"gpt2\", \"llama\"); \
                 load the model's tokenizer.json instead"
            ))),
        }
    }

    /// gpt2-style byte-level BPE: vocabulary, merge list and a pre-tokenizer regex.
    fn byte_level_bpe(g: &Gguf<'_>) -> Result<Self> {
        let tokens = g.get_str_array("tokenizer.ggml.tokens")?;
        let merges = g.get_str_array("tokenizer.ggml.merges")?;
        let types = token_types(g, tokens.len())?;
        let mut vocab = HashMap::with_capacity(tokens.len());
        for (id, t) in tokens.iter().enumerate() {
            let id = u32::try_from(id).map_err(tok_err)?;
            if vocab.insert(t.to_string(), id).is_some() {
                return Err(FormatError::Tokenizer(format!(
                    "token {t:?} appears twice in tokenizer.ggml.tokens"
                )));
            }
        }
        let merges: Vec<(String, String)> = merges
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| {
                        FormatError::Tokenizer(format!(
                            "tokenizer.ggml.merges[{i}] = {m:?} has no space"
                        ))
                    })
            })
            .collect::<Result<_>>()?;
        let vocab: tokenizers::models::bpe::Vocab = vocab.into_iter().collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(tok_err)?;
        let mut inner = tokenizers::Tokenizer::new(bpe);

        let pre = match g.get("tokenizer.ggml.pre") {
            Some(Value::String(s)) => s.as_str(),
            _ => "default",
        };
        let pre_tokenizer: PreTokenizerWrapper = match pre_rule(pre) {
            Some(PreRule::Gpt2) => ByteLevel::new(false, true, true).into(),
            Some(PreRule::SmolLm) => Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
            Some(PreRule::Llama3) => split_then_bytes(LLAMA3_REGEX)?,
            Some(PreRule::Qwen2) => split_then_bytes(QWEN2_REGEX)?,
            None => {
                let names: Vec<&str> = PRE_NAMES.iter().map(|(n, _)| *n).collect();
                return Err(FormatError::Tokenizer(format!(
                    "tokenizer.ggml.pre = {pre:?} is not supported (supported: {})",
                    names.join(", ")
                )));
            }
        };
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        add_special_tokens(&mut inner, &tokens, &types);

        let add_bos = matches!(
            g.get("tokenizer.ggml.add_bos_token"),
            Some(Value::Bool(true))
        );
        Self::finish(g, inner, tokens.len(), add_bos, false)
    }

    /// llama SentencePiece (`tokenizer.ggml.model = "llama"`): pieces with scores, "▁" for
    /// spaces, `<0xXX>` byte fallback. Built as HF does for LlamaTokenizerFast: a BPE whose
    /// merges are every split of a piece into two pieces, ranked by the merged piece's score
    /// (SentencePiece merges the best-scoring pair first), plus a "▁" prefix and " " → "▁".
    fn sentencepiece(g: &Gguf<'_>) -> Result<Self> {
        let tokens = g.get_str_array("tokenizer.ggml.tokens")?;
        let scores: Vec<f64> = match g.get("tokenizer.ggml.scores") {
            Some(Value::Array(_, items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                        FormatError::Tokenizer(format!(
                            "tokenizer.ggml.scores[{i}] = {v:?} is not a finite number"
                        ))
                    })
                })
                .collect::<Result<_>>()?,
            Some(other) => {
                return Err(FormatError::WrongType {
                    key: "tokenizer.ggml.scores".into(),
                    expected: "array of f32",
                    found: other.type_name().into(),
                });
            }
            None => {
                return Err(FormatError::MissingKey {
                    key: "tokenizer.ggml.scores".into(),
                });
            }
        };
        let types = token_types(g, tokens.len())?;
        if scores.len() != tokens.len() {
            return Err(FormatError::Tokenizer(format!(
                "tokenizer.ggml.scores has {} entries, tokenizer.ggml.tokens has {}",
                scores.len(),
                tokens.len()
            )));
        }
        let mut vocab: HashMap<String, u32> = HashMap::with_capacity(tokens.len());
        for (id, t) in tokens.iter().enumerate() {
            let id = u32::try_from(id).map_err(tok_err)?;
            if vocab.insert(t.to_string(), id).is_some() {
                return Err(FormatError::Tokenizer(format!(
                    "token {t:?} appears twice in tokenizer.ggml.tokens"
                )));
            }
        }
        // Every split of every piece into two pieces is a merge; rank by the merged piece's
        // score (best first), then by piece id, then by the halves' ids (HF's order).
        let mut ranked: Vec<(f64, u32, u32, u32)> = Vec::new();
        for (id, piece) in tokens.iter().enumerate() {
            for (at, _) in piece.char_indices().skip(1) {
                let (l, r) = piece.split_at(at);
                if let (Some(&li), Some(&ri)) = (vocab.get(l), vocab.get(r)) {
                    ranked.push((scores[id], id as u32, li, ri));
                }
            }
        }
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        let merges: Vec<(String, String)> = ranked
            .iter()
            .map(|&(_, _, l, r)| {
                (
                    tokens[l as usize].to_string(),
                    tokens[r as usize].to_string(),
                )
            })
            .collect();
        let unk = types
            .iter()
            .position(|&t| t == UNKNOWN)
            .map(|i| tokens[i].to_string());
        let vocab: tokenizers::models::bpe::Vocab = vocab.into_iter().collect();
        let mut builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(true)
            .fuse_unk(true);
        if let Some(unk) = unk {
            builder = builder.unk_token(unk);
        }
        let bpe = builder.build().map_err(tok_err)?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let space_prefix = !matches!(
            g.get("tokenizer.ggml.add_space_prefix"),
            Some(Value::Bool(false))
        );
        let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
        if space_prefix {
            normalizers.push(Prepend::new("▁".into()).into());
        }
        normalizers.push(Replace::new(" ", "▁").map_err(tok_err)?.into());
        inner.with_normalizer(Some(NormalizerSequence::new(normalizers)));
        inner.with_decoder(Some(DecoderSequence::new(vec![
            DecoderWrapper::Replace(Replace::new("▁", " ").map_err(tok_err)?),
            ByteFallback::default().into(),
            Fuse::default().into(),
        ])));
        add_special_tokens(&mut inner, &tokens, &types);
        // llama.cpp's default for SentencePiece vocabularies is to add BOS.
        let add_bos = !matches!(
            g.get("tokenizer.ggml.add_bos_token"),
            Some(Value::Bool(false))
        );
        Self::finish(g, inner, tokens.len(), add_bos, space_prefix)
    }

    /// Special ids and stop tokens, shared by the GGUF builders.
    fn finish(
        g: &Gguf<'_>,
        inner: tokenizers::Tokenizer,
        n_tokens: usize,
        add_bos: bool,
        strip_space_prefix: bool,
    ) -> Result<Self> {
        let id_of = |key: &str| -> Result<Option<u32>> {
            match g.get(key) {
                None => Ok(None),
                Some(v) => {
                    let id = v
                        .as_u64()
                        .and_then(|id| u32::try_from(id).ok())
                        .filter(|&id| (id as usize) < n_tokens);
                    id.map(Some).ok_or_else(|| {
                        FormatError::Tokenizer(format!(
                            "{key} = {v:?} is not a token id below {n_tokens}"
                        ))
                    })
                }
            }
        };
        let bos = id_of("tokenizer.ggml.bos_token_id")?;
        let eos = id_of("tokenizer.ggml.eos_token_id")?;
        let eot = id_of("tokenizer.ggml.eot_token_id")?;
        let mut stop_ids: Vec<u32> = eos.into_iter().chain(eot).collect();
        for name in [
            "<|im_end|>",
            "<|eot_id|>",
            "<|end_of_text|>",
            "<|endoftext|>",
            "</s>",
        ] {
            if let Some(id) = inner.token_to_id(name).filter(|id| !stop_ids.contains(id)) {
                stop_ids.push(id);
            }
        }
        Ok(Self {
            inner,
            bos,
            eos,
            add_bos,
            stop_ids,
            strip_space_prefix,
        })
    }

    /// Builds a tokenizer from an HF `tokenizer.json`.
    ///
    /// # Errors
    /// [`FormatError::Tokenizer`] when the JSON is not a tokenizer the crate can load.
    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        // tokenizers 0.22 panics (an `expect` in its decoder deserializer) when the JSON text
        // under "decoder" is malformed (a syntax error, invalid UTF-8, a bad \u escape); found by
        // fuzzing. Parsing into a JSON value first catches every such error here, and the
        // tokenizer is then built from the value, where that deserializer cannot fail that way.
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
            FormatError::Tokenizer(format!("tokenizer.json is not valid JSON: {e}"))
        })?;
        let inner: tokenizers::Tokenizer = serde_json::from_value(value).map_err(tok_err)?;
        let find = |names: &[&str]| names.iter().find_map(|n| inner.token_to_id(n));
        let bos = find(&["<s>", "<|begin_of_text|>"]);
        let eos = find(&["</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>"]);
        let stop_ids = [
            "</s>",
            "<|end_of_text|>",
            "<|endoftext|>",
            "<|im_end|>",
            "<|eot_id|>",
        ]
        .iter()
        .filter_map(|n| inner.token_to_id(n))
        .collect();
        // A post-processor in the JSON already adds BOS where the model wants it.
        Ok(Self {
            inner,
            bos,
            eos,
            add_bos: false,
            stop_ids,
            strip_space_prefix: false,
        })
    }

    /// Token ids of `text`. Special-token text (`<|im_start|>`) maps to its id; a BOS is
    /// prepended when the model asks for one and `with_bos` is set.
    ///
    /// # Errors
    /// [`FormatError::Tokenizer`] if the tokenizer fails on the text.
    pub fn encode(&self, text: &str, with_bos: bool) -> Result<Vec<u32>> {
        let encoding = self.inner.encode(text, false).map_err(tok_err)?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if with_bos && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// The text of `ids`, special tokens included.
    ///
    /// # Errors
    /// [`FormatError::Tokenizer`] for ids outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let text = self.decode_pieces(ids)?;
        Ok(match text.strip_prefix(' ') {
            Some(rest) if self.strip_space_prefix => rest.to_string(),
            _ => text,
        })
    }

    /// The pieces' text as is (a SentencePiece word keeps its leading space): what streaming
    /// shows between chunks.
    fn decode_pieces(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(tok_err)
    }

    /// Number of ids, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The vocabulary string of one id.
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a vocabulary string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// A streaming decoder over this tokenizer.
    pub fn stream(&self) -> StreamDecoder<&Self> {
        StreamDecoder::new(self)
    }
}

impl AsRef<Tokenizer> for Tokenizer {
    fn as_ref(&self) -> &Tokenizer {
        self
    }
}

fn split_then_bytes(regex: &str) -> Result<PreTokenizerWrapper> {
    let split = Split::new(
        SplitPattern::Regex(regex.to_string()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(tok_err)?;
    Ok(Sequence::new(vec![
        split.into(),
        ByteLevel::new(false, true, false).into(),
    ])
    .into())
}

/// Turns a stream of ids into text chunks that never split a UTF-8 character: a byte-level
/// token can hold half of an emoji, so text is emitted only once it decodes without a trailing
/// replacement character.
///
/// `T` is how the decoder holds its tokenizer: `&Tokenizer`, or `Arc<Tokenizer>` for a decoder
/// that outlives the borrow (the engine's, the browser worker's).
#[derive(Debug, Clone)]
pub struct StreamDecoder<T> {
    tokenizer: T,
    ids: Vec<u32>,
    /// Start of the ids re-decoded as context, so that decoders that look at neighbours
    /// (leading spaces) see them.
    prefix: usize,
    /// End of the ids already emitted.
    read: usize,
}

impl<T: AsRef<Tokenizer>> StreamDecoder<T> {
    /// A decoder with nothing pushed yet.
    pub fn new(tokenizer: T) -> Self {
        Self {
            tokenizer,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }

    /// Adds one id; returns the new text, if a complete piece is ready.
    ///
    /// # Errors
    /// [`FormatError::Tokenizer`] for an id outside the vocabulary.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let (before, now) = self.window()?;
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') {
            let text = match now.strip_prefix(before.as_str()) {
                Some(rest) => rest.to_string(),
                None => now,
            };
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(Some(text))
        } else {
            Ok(None)
        }
    }

    /// The context window decoded without and with the ids not yet emitted.
    fn window(&self) -> Result<(String, String)> {
        let t = self.tokenizer.as_ref();
        Ok((
            t.decode_pieces(&self.ids[self.prefix..self.read])?,
            t.decode_pieces(&self.ids[self.prefix..])?,
        ))
    }

    /// Whatever is still held back (an incomplete character at the end of generation).
    ///
    /// # Errors
    /// [`FormatError::Tokenizer`] for an id outside the vocabulary.
    pub fn finish(&mut self) -> Result<Option<String>> {
        let (before, now) = self.window()?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(now
            .strip_prefix(before.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pre_name_has_one_rule() {
        for (i, (name, rule)) in PRE_NAMES.iter().enumerate() {
            assert!(
                PRE_NAMES[..i].iter().all(|(n, _)| n != name),
                "{name} twice"
            );
            assert_eq!(pre_rule(name), Some(*rule));
        }
        assert_eq!(pre_rule("deepseek-r1-qwen"), Some(PreRule::Qwen2));
        assert_eq!(pre_rule("falcon3"), Some(PreRule::Llama3));
        // llama.cpp's own rules that mars does not have are not mapped to a near one.
        for lacking in ["qwen35", "deepseek-v3", "gpt-4o", "starcoder", ""] {
            assert_eq!(pre_rule(lacking), None, "{lacking}");
        }
    }
}
