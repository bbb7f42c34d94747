//! In headless Chromium on WebGPU (SwiftShader in CI), a browser session of its own: the page's
//! tuning of the GPU kernels (`mars_engine::tune`), every form of every shape compiled by
//! Chrome's WGSL compiler and timed there.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_formats::Gguf;
use mars_model::tiny::tiny_gguf_quantized;
use mars_model::{KvType, Llama, LoadOptions, WeightPath};
use wasm_bindgen_test::*;

mod common;
use common::{TOLERANCE, device, log};

wasm_bindgen_test_configure!(run_in_browser);

/// A GPU tunes itself in the browser as natively: the page's load runs the engine's one tuning
/// (`mars_engine::tune`) with WebGPU's asynchronous reads and the page's clock. Every form of
/// every group shape compiles in Chrome's WebGPU and agrees with the rules' outputs (Tint checks
/// what naga does not: the tiles' barriers once sat in a loop whose count WGSL's uniformity
/// analysis took as varying, and Chrome refused the module); each shape timed, the table naming
/// each choice, its text (as the page stores it) naming the same forms; a load with it
/// (`with_table`, SwiftShader judged a card here: the page's software judgement is what keeps a
/// CPU adapter from timing) times nothing and gives those forms; a software adapter times
/// nothing. Every form but one: the card is said to hold matrix units, which SwiftShader lacks
/// (WGSL's `wgpu_cooperative_matrix` is naga's, not Chrome's), as a browser may refuse a form
/// its adapter was taken to hold; each group's units row is refused, counted as disagreeing,
/// neither timed nor chosen, and the tuning goes on to its end (the refused launch had gone to
/// CubeCL, whose unchecked pipeline's error panicked the page in the device's handler). The
/// tuned model keeps the forward's contract: each row's logits the same bits alone as in a
/// pass of five in the one-row forms, and within the chosen forms' bound of the rules' forms.
#[wasm_bindgen_test]
async fn a_gpu_tunes_itself_in_the_browser() {
    use mars_engine::GpuCaps;
    use mars_engine::tune::{PASS_ROWS, Timed, tune, with_table};
    use mars_model::{Form, TileForm, Tuning, UnitShape};
    let bytes = tiny_gguf_quantized(7).unwrap();
    let options = LoadOptions::with_weights(WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::default(),
    });
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &device().await, options).unwrap();
    let shapes = model.group_forms();
    let forms = |m: &Llama| {
        m.group_forms()
            .into_iter()
            .map(|g| (g.shape, g.form))
            .collect::<Vec<_>>()
    };
    let caps = GpuCaps::plain;
    let card = GpuCaps {
        matrix_units: vec![UnitShape::CARD],
        ..caps("a test card (WebGPU, Chrome/1)", false)
    };
    let mut table = Tuning::default();
    let units = |f: &Form| matches!(f.prefill, Some(TileForm::Units(_)));
    let before = mars_model::gpu_counts();
    let timings = tune(&model, &card, (PASS_ROWS, 1.0), &mut table, true)
        .await
        .unwrap();
    // Every form's first launches are of pipelines the browser has yet to answer for: they go
    // direct all the same (they had gone to CubeCL, whose unchecked pipeline a refusal panics).
    let tuning = mars_model::gpu_counts().since(&before);
    assert_eq!(tuning.fallbacks, 0, "launches left to CubeCL: {tuning:?}");
    assert_eq!(timings.len(), shapes.len());
    for t in &timings {
        for f in &t.times {
            assert!(f.agrees && f.one_row_ms > 0.0, "{}: {f:?}", t.shape.role);
        }
        for p in &t.prefill {
            match units(&p.form) {
                true => assert!(!p.agrees && p.ms.is_nan(), "{}: {p:?}", t.shape.role),
                false => assert!(p.agrees && p.ms > 0.0, "{}: {p:?}", t.shape.role),
            }
        }
        assert!(!t.chosen().is_some_and(|f| units(&f)), "{t:?}");
        // Every group but the head meets a prefill: the mat-vec form and f32 tiles, the tall
        // f32 tiles where the device's workgroup memory holds them (over WebGPU's 16 KiB), and
        // the units' (the test model's groups are too small to split).
        let kinds: Vec<Option<TileForm>> = t.prefill.iter().map(|p| p.form.prefill).collect();
        if t.shape.role == "head" {
            assert!(kinds.is_empty(), "{kinds:?}");
        } else {
            let last = kinds.len() - 1;
            assert_eq!(kinds[..2], [None, Some(TileForm::Vectors)], "{kinds:?}");
            assert!(
                kinds[2..last].is_empty() || kinds[2..last] == [Some(TileForm::TallVectors)],
                "{kinds:?}"
            );
            assert_eq!(
                kinds[last],
                Some(TileForm::Units(UnitShape::CARD)),
                "{kinds:?}"
            );
        }
    }
    assert_eq!(table.len(), shapes.len());
    let stored = Tuning::parse(&table.to_text()).unwrap();
    let (tuned, timed) = with_table(model.clone(), &card, &mut table.clone())
        .await
        .unwrap();
    assert_eq!(timed, Timed::Nothing);
    for (shape, form) in forms(&tuned) {
        assert_eq!(
            table.get(&card.identity, &shape).unwrap().form,
            form,
            "{shape}"
        );
        assert_eq!(
            stored.get(&card.identity, &shape).unwrap().form,
            form,
            "{shape}"
        );
    }
    let mut empty = Tuning::default();
    let soft = caps("google swiftshader (WebGPU, Chrome/1)", true);
    let (plain, timed) = with_table(model.clone(), &soft, &mut empty).await.unwrap();
    assert_eq!(timed, Timed::Nothing);
    assert_eq!(forms(&plain), forms(&model));
    assert_eq!(empty.len(), 0);

    // The model with every group's prefill on the units: a long prefill (past `TILES_ABOVE`
    // rows, in tiles) fails its read, naming the refused tile and Chrome's reason; the reads
    // after it, in the rules' forms, are clean (the refused launches alone were dropped).
    let on_units = model
        .with_forms(&|s| {
            let t = timings.iter().find(|t| t.shape.shape == s)?;
            let p = t.prefill.iter().find(|p| units(&p.form))?;
            Some(p.form)
        })
        .unwrap();
    let long: Vec<u32> = (0..40).map(|i| (i * 41 + 17) % 257).collect();
    let mut cache = on_units.new_cache(64).unwrap();
    match on_units
        .forward_last(&long, &mut cache)
        .unwrap()
        .read_async()
        .await
    {
        Err(mars_model::ModelError::Kernel(mars_kernels::KernelError::Refused {
            kernel,
            reason,
        })) => {
            log(&format!(
                "the units' prefill in the browser: {kernel} refused: {reason}"
            ));
            assert!(kernel.starts_with("tile"), "{kernel}: {reason}");
            assert!(reason.contains("cooperative_matrix"), "{kernel}: {reason}");
        }
        other => panic!("a prefill on refused tiles read back as {other:?}"),
    }
    let tokens: Vec<u32> = (0..5).map(|i| (i * 41 + 17) % 257).collect();
    let pass = |m: &Llama| {
        let m = m.clone();
        let tokens = tokens.clone();
        async move {
            let mut cache = m.new_cache(32).unwrap();
            m.forward(&tokens, &mut cache)
                .unwrap()
                .read_async()
                .await
                .unwrap()
        }
    };
    let rule = pass(&model).await;
    let got = pass(&tuned).await;
    // 8-bit activations move a shape's logits by up to 0.1 on this model (crates/model's
    // backends test); f32 forms only by the order of their sums.
    let q8 = forms(&tuned)
        .iter()
        .filter(|(_, f)| f.acts.is_q8() || f.pass_form().acts.is_q8())
        .count();
    let bound = if q8 == 0 { TOLERANCE } else { 0.1 * q8 as f32 };
    let worst = got
        .iter()
        .zip(&rule)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    log(&format!(
        "tuned in the browser: {:?}; max |Δ logit| against the rules' forms {worst:.2e}",
        forms(&tuned)
            .iter()
            .map(|(s, f)| format!("{s}: {}", f.name()))
            .collect::<Vec<_>>()
    ));
    assert!(worst < bound, "{worst} (bound {bound})");
    // Passes may have a form of their own (`Form::pass`): a row alone takes the one-row form's
    // bits, those of the same row in a pass of five in the one-row forms alone.
    let one_row_forms = forms(&tuned);
    let one_row = tuned
        .with_forms(&|s| {
            let (_, f) = one_row_forms.iter().find(|(shape, _)| shape == s)?;
            Some(Form { pass: None, ..*f })
        })
        .unwrap();
    let got = pass(&one_row).await;
    let vocab = tuned.config().vocab_size;
    let mut cache = tuned.new_cache(32).unwrap();
    for (i, &id) in tokens.iter().enumerate() {
        let row = tuned
            .forward(&[id], &mut cache)
            .unwrap()
            .read_async()
            .await
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&row),
            bits(&got[i * vocab..(i + 1) * vocab]),
            "row {i}"
        );
    }
}
