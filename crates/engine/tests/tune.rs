//! A GPU tunes itself (`mars_engine::tune`), on lavapipe with the tiny model: a card's first
//! load times every group shape once and saves the choices; a later load reads them and times
//! nothing; a CPU adapter applies what a table holds and never times; another build's table is
//! set aside; a table of this build's that does not parse is an error naming its line.
#![cfg(feature = "wgpu")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mars_engine::GpuCaps;
use mars_engine::tune::{at_load_with, read_table, write_table};
use mars_formats::Gguf;
use mars_model::tiny::tiny_gguf_quantized;
use mars_model::{Device, Fan, Form, KvType, Llama, LoadOptions, Team, Tuned, Tuning, WeightPath};

fn forms(model: &Llama) -> Vec<(String, Form)> {
    model
        .group_forms()
        .into_iter()
        .map(|g| (g.shape, g.form))
        .collect()
}

#[test]
fn a_card_tunes_once_and_later_loads_read_its_choices() {
    let (device, _) = Device::wgpu_options()
        .init_with_setup()
        .expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
    let bytes = tiny_gguf_quantized(7).unwrap();
    let options = LoadOptions::with_weights(WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::default(),
    });
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &device, options).unwrap();
    let dir = std::env::temp_dir().join(format!("mars-tune-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let caps = GpuCaps::plain;

    // A card's first load: every shape timed, the table written (its folder made).
    let card = caps("a test card (Vulkan) driver 1", false);
    let path = dir.join("cache").join("tune.tsv");
    let (tuned, note) = pollster::block_on(at_load_with(model.clone(), &card, &path)).unwrap();
    let shapes = model.group_forms();
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains(&format!("{} group shapes", shapes.len()))),
        "{note:?}"
    );
    let table = read_table(&path).unwrap();
    assert_eq!(table.len(), shapes.len());
    for (shape, form) in forms(&tuned) {
        assert_eq!(
            table.get(&card.identity, &shape).unwrap().form,
            form,
            "{shape}"
        );
    }
    // Its next load: nothing timed, the same forms, the table as it was.
    let (again, note) = pollster::block_on(at_load_with(model.clone(), &card, &path)).unwrap();
    assert_eq!(note, None);
    assert_eq!(forms(&again), forms(&tuned));
    assert_eq!(read_table(&path).unwrap(), table);

    // A CPU adapter: the forms a table names for it applied, nothing timed; none named: the
    // rules' forms, and no file written.
    let soft = caps("lavapipe (Vulkan) Mesa", true);
    let other: Vec<(String, Form)> = forms(&model)
        .into_iter()
        .map(|(shape, form)| {
            let fan = if form.fan == Fan::One {
                Fan::Four
            } else {
                Fan::One
            };
            (
                shape,
                Form {
                    team: Team::Quarter,
                    fan,
                    acts: form.acts,
                    pass: None,
                    prefill: form.prefill,
                    split: form.split,
                },
            )
        })
        .collect();
    let mut hand = Tuning::default();
    for (shape, form) in &other {
        let tuned = Tuned {
            form: *form,
            one_row_ms: 1.0,
            pass_ms: 2.0,
            prefill_ms: Some(3.0),
        };
        hand.insert(&soft.identity, shape, tuned);
    }
    let hand_path = dir.join("hand.tsv");
    write_table(&hand_path, &hand).unwrap();
    let (applied, note) =
        pollster::block_on(at_load_with(model.clone(), &soft, &hand_path)).unwrap();
    assert_eq!(note, None);
    assert_eq!(forms(&applied), other);
    assert_eq!(read_table(&hand_path).unwrap(), hand);
    let none = dir.join("none.tsv");
    let (plain, note) = pollster::block_on(at_load_with(model.clone(), &soft, &none)).unwrap();
    assert_eq!((note, forms(&plain)), (None, forms(&model)));
    assert!(!none.exists());

    // Another build's table, a form this one lacks among its lines: set aside, the load goes
    // on in the rules' forms.
    std::fs::write(
        &hand_path,
        "# mars tune 4 (an earlier build)\nadapter\tshape\teighth/3/tiles\t1\t2\t3\n",
    )
    .unwrap();
    let (plain, note) = pollster::block_on(at_load_with(model.clone(), &soft, &hand_path)).unwrap();
    assert_eq!((note, forms(&plain)), (None, forms(&model)));

    // This build's table that does not parse: refused with its file and line.
    std::fs::write(
        &hand_path,
        format!(
            "{}adapter\tshape\tquarter/3/tiles\t1\t2\t3\n",
            Tuning::default().to_text()
        ),
    )
    .unwrap();
    let err = pollster::block_on(at_load_with(model, &soft, &hand_path))
        .unwrap_err()
        .to_string();
    assert!(err.contains("hand.tsv") && err.contains("line 2"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
