//! `mars eval humaneval`: HumanEval pass@1 for target-only, strict and MARS (one or more θ / ρ)
//! with one drafter, each completion executed against its problem's tests in the sandbox; per
//! method pass@1, τ, tokens/s, speedup over target-only, relaxed share, the ledger's moved mass,
//! and the problems whose verdict differs from strict's.

pub mod code;
mod journal;
mod report;
pub mod sandbox;

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use mars_engine::{Backend, Choices, DEFAULTS, Method, MethodOutput, RunSummary};
use mars_verify::Mode;
use serde::{Deserialize, Serialize};

use crate::args::{self, KernelArgs, SamplingArgs};
use crate::compare::Runner;
use crate::compare::report::mode_label;
use code::Problem;
use journal::{path_settings, resume};
use report::{markdown, plot, report};
use sandbox::{Limits, Outcome, Sandbox, Verdict};

/// `mars eval` tasks.
#[derive(Debug, clap::Subcommand)]
pub enum EvalTask {
    /// HumanEval (164 Python problems, `bash tests/fetch-humaneval.sh`): pass@1 of target-only,
    /// strict and MARS decoding, each completion run against the problem's tests.
    Humaneval(HumanEvalArgs),
}

/// `mars eval humaneval` options.
#[derive(Debug, clap::Args)]
pub struct HumanEvalArgs {
    /// Target GGUF model (default: Qwen2.5-Coder-1.5B-Instruct when the pair is in the cache).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The drafter (`model:PATH`, `layers:SPEC`, `ngram`; default: the pair's 0.5B draft model
    /// when the pair is in the cache, else the engine's default drafter).
    #[arg(long)]
    pub draft: Option<String>,
    #[command(flatten)]
    pub shape: mars_engine::DraftShape,
    /// MARS paper-mode thresholds, one run each: `--theta 0.9,0.95`.
    #[arg(long, value_delimiter = ',')]
    pub theta: Vec<f32>,
    /// MARS margin-mode thresholds, one run each: `--rho 0.5,0.8`. Without --theta or --rho:
    /// the engine's default MARS mode.
    #[arg(long, value_delimiter = ',')]
    pub rho: Vec<f32>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Paired sampling seeds: every problem is answered with --seed S, S + 1, …, S + N − 1, every
    /// method of a problem with the same seed; pass@1 is the mean over problems and seeds, with
    /// 95 % intervals from a bootstrap over problems.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// Where the model runs: auto takes a GPU adapter where there is one (the run's first
    /// lines say which and why), else the CPU.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub device: Backend,
    #[command(flatten)]
    pub kernels: KernelArgs,
    /// The problems file (default: HumanEval.jsonl in the data cache, `$MARS_DATA_DIR` or
    /// `~/.cache/mars/data`).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Only these problems: `--problems HumanEval/0,HumanEval/12`.
    #[arg(long, value_delimiter = ',')]
    pub problems: Vec<String>,
    /// At most this many problems (after --problems), in file order.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Most tokens generated per problem and method.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Wall-clock seconds each program may run.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Run every program twice and fail if a verdict differs.
    #[arg(long)]
    pub check_determinism: bool,
    /// Directory for eval.md, eval.json and eval.svg, and for the run's journal
    /// (records.jsonl, one line per finished problem) and settings (settings.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Go on with the run journaled in --out: the problems already there are kept (the
    /// settings must be the same, or it is an error naming the one that differs) and only the
    /// rest run. Each problem's methods run back to back, so its speed ratios stay measured
    /// together whichever run it was in.
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// Print the whole record as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One method's answer to one problem.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Attempt {
    method: String,
    text: String,
    code: String,
    #[serde(flatten)]
    outcome: Outcome,
    summary: RunSummary,
}

/// One problem answered by every method with one sampling seed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ProblemRecord {
    task_id: String,
    seed: u64,
    prompt_tokens: usize,
    attempts: Vec<Attempt>,
}

/// One method over every problem.
#[derive(Debug, Clone, Serialize)]
struct MethodReport {
    method: String,
    mode: Option<Mode>,
    /// Answers that pass (over problems and seeds).
    passed: usize,
    pass_at_1: f64,
    /// 95 % interval of pass@1 (bootstrap over problems, see [`report::intervals`]).
    pass_at_1_ci: [f64; 2],
    /// pass@1 relative to strict's.
    of_strict: f64,
    /// 95 % interval of `of_strict`, paired: each resample takes a problem's answers of every
    /// method and seed together.
    of_strict_ci: [f64; 2],
    speedup: f64,
    /// Answers (`task (seed s)` with several seeds) this method passes and strict fails.
    won: Vec<String>,
    /// Answers strict passes and this method fails.
    lost: Vec<String>,
    summary: RunSummary,
}

#[derive(Debug, Clone, Serialize)]
struct EvalRecord {
    model: String,
    drafter: String,
    k: usize,
    temperature: f32,
    /// The sampling seeds, each problem answered once per seed.
    seeds: Vec<u64>,
    max_tokens: usize,
    isolation: String,
    limits: Limits,
    problems: usize,
    /// Problems × seeds.
    answers: usize,
    methods: Vec<MethodReport>,
    /// The relaxed setting the defaults rule picks (see [`choose_default`]), if any qualifies.
    default_choice: Option<String>,
    records: Vec<ProblemRecord>,
}

/// pass@1 a relaxed setting must keep, as a share of strict's, to be eligible as the default.
pub const KEEP_OF_STRICT: f64 = 0.99;

/// The project's rule for the default MARS setting: among the relaxed (MARS) methods whose
/// pass@1 is at least [`KEEP_OF_STRICT`] of strict's, the one with the highest speedup; `None`
/// when no relaxed setting keeps that much (then the defaults stay conservative, and the
/// README says so).
fn choose_default(methods: &[MethodReport]) -> Option<&MethodReport> {
    methods
        .iter()
        .filter(|m| m.mode.is_some_and(|mode| mode != Mode::Strict))
        .filter(|m| m.of_strict >= KEEP_OF_STRICT)
        .max_by(|a, b| a.speedup.total_cmp(&b.speedup))
}

/// The methods of a run: target-only, strict, then each MARS mode.
fn methods(args: &HumanEvalArgs) -> Result<Vec<(String, Method, Mode)>> {
    let mut modes = Vec::new();
    for &theta in &args.theta {
        modes.push(Mode::resolve(Some(theta), None, DEFAULTS.mars)?);
    }
    for &rho in &args.rho {
        modes.push(Mode::resolve(None, Some(rho), DEFAULTS.mars)?);
    }
    if modes.is_empty() {
        modes.push(DEFAULTS.mars);
    }
    let mut out = vec![
        ("target-only".to_string(), Method::Target, Mode::Strict),
        ("strict".to_string(), Method::Strict, Mode::Strict),
    ];
    out.extend(modes.into_iter().map(|m| (mode_label(m), Method::Mars, m)));
    Ok(out)
}

pub fn run_eval(task: &EvalTask) -> Result<()> {
    let EvalTask::Humaneval(args) = task;
    let data = args
        .data
        .clone()
        .unwrap_or_else(|| args::data_dir().join("HumanEval.jsonl"));
    let problems = code::read(&data, &args.problems, args.limit)?;
    if problems.is_empty() {
        bail!("no problems selected from {}", data.display());
    }
    let methods = methods(args)?;
    let sandbox = Sandbox::new(Limits {
        timeout_s: args.timeout,
        ..Limits::default()
    })?;
    let pair = args::pair_in_cache();
    let model = match (&args.model, &pair) {
        (Some(m), _) => m.clone(),
        (None, Some((target, _))) => target.clone(),
        (None, None) => bail!(
            "no --model, and the Qwen2.5-Coder pair is not in the cache (bash tests/fetch-pair.sh)"
        ),
    };
    let drafter = match (&args.draft, &pair) {
        (Some(d), _) => Some(args::drafter_text(d)),
        (None, Some((_, draft))) => Some(format!("model:{}", draft.display())),
        (None, None) => None,
    };
    // The MARS mode is per method (`methods`); the rest is the run's. HumanEval's prompts are
    // instructions: the chat template whatever the default.
    let run = args::resolve([
        Choices {
            drafter: drafter.map(Into::into),
            shape: Some(args.shape),
            max_tokens: Some(args.max_tokens),
            chat: Some(true),
            ..Choices::NONE
        },
        args.sampling.choices(),
    ])?;
    let runner = Runner::new(model.clone(), args.device, &args.kernels, run)?;
    eprintln!(
        "humaneval: {} problems × {} methods · sandbox: {}",
        problems.len(),
        methods.len(),
        sandbox.isolation().describe()
    );
    let mut settings = serde_json::json!({
        "model": model.display().to_string(),
        "drafter": runner.run.drafter_label(),
        "temperature": runner.run.sampling.temperature,
        // null without top-k: a journal written before top-k was recorded resumes as before.
        "top_k": runner.run.sampling.top_k,
        "top_p": runner.run.sampling.top_p,
        "seed": runner.run.seed,
        "seeds": args.seeds,
        "max_tokens": runner.run.max_tokens,
        "methods": methods.iter().map(|(label, _, _)| label.clone()).collect::<Vec<_>>(),
        "timeout_s": args.timeout,
    });
    if let Some(all) = settings.as_object_mut() {
        // k, draft_vocab, tree, branch, tree_min_p: the engine's one list of them.
        if let serde_json::Value::Object(shape) = serde_json::to_value(runner.run.shape)? {
            all.extend(shape);
        }
        all.extend(path_settings(runner.backend, runner.weights));
    }
    let (journal, done) = match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let done = if args.resume {
                resume(dir, &settings)?
            } else {
                std::fs::write(
                    dir.join("settings.json"),
                    serde_json::to_string_pretty(&settings)?,
                )?;
                // A fresh run: an earlier journal here is replaced, not appended to.
                std::fs::write(dir.join("records.jsonl"), "")?;
                Vec::new()
            };
            (Some(dir.join("records.jsonl")), done)
        }
        None => (None, Vec::new()),
    };
    let seeds: Vec<u64> = (0..args.seeds)
        .map(|i| runner.run.seed.checked_add(i))
        .collect::<Option<_>>()
        .with_context(|| {
            format!(
                "--seed {} + --seeds {} overflows",
                runner.run.seed, args.seeds
            )
        })?;
    // (problem, seed) pairs not in the journal.
    let todo: Vec<(&Problem, u64)> = problems
        .iter()
        .flat_map(|p| seeds.iter().map(move |&s| (p, s)))
        .filter(|(p, s)| !done.iter().any(|r| r.task_id == p.task_id && r.seed == *s))
        .collect();
    if args.resume {
        eprintln!(
            "resuming: {} answers kept from the journal, {} to run",
            problems.len() * seeds.len() - todo.len(),
            todo.len()
        );
    }
    runner.warm_up()?;
    let new = run_problems(
        &runner,
        &sandbox,
        &todo,
        &methods,
        args.check_determinism,
        journal.as_deref(),
        &done,
    )?;
    // Problem and seed order, whichever run measured each one.
    let records: Vec<ProblemRecord> = problems
        .iter()
        .flat_map(|p| seeds.iter().map(move |&s| (p, s)))
        .filter_map(|(p, s)| {
            done.iter()
                .chain(&new)
                .find(|r| r.task_id == p.task_id && r.seed == s)
                .cloned()
        })
        .collect();
    let methods = report(&methods, &records);
    let default_choice = choose_default(&methods).map(|m| m.method.clone());
    let record = EvalRecord {
        model: model.display().to_string(),
        drafter: runner.run.drafter_label(),
        k: runner.run.shape.k,
        temperature: runner.run.sampling.temperature,
        answers: records.len(),
        seeds,
        max_tokens: runner.run.max_tokens,
        isolation: sandbox.isolation().describe(),
        limits: sandbox.limits(),
        problems: problems.len(),
        methods,
        default_choice,
        records,
    };
    let table = markdown(&record);
    if let Some(dir) = &args.out {
        // The directory exists: the journal was created in it.
        std::fs::write(dir.join("eval.md"), &table)?;
        std::fs::write(
            dir.join("eval.json"),
            serde_json::to_string_pretty(&record)?,
        )?;
        plot(&dir.join("eval.svg"), &record)?;
        eprintln!("wrote {}/eval.md, eval.json, eval.svg", dir.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print!("{table}");
    }
    Ok(())
}

/// Every (problem, seed): one prefill a problem, then each method's decode with that seed, its
/// code extracted and executed.
/// With `journal`, each finished problem's record is appended to it as one JSON line, so an
/// interrupted run of an hour or more keeps what it measured (and `--resume` goes on from it);
/// when stderr is not a terminal (a background run, CI) the progress bar is hidden and one line
/// per problem says where it is, its tally counting the `earlier` records too.
fn run_problems(
    runner: &Runner,
    sandbox: &Sandbox,
    problems: &[(&Problem, u64)],
    methods: &[(String, Method, Mode)],
    check_determinism: bool,
    journal: Option<&Path>,
    earlier: &[ProblemRecord],
) -> Result<Vec<ProblemRecord>> {
    let bar = ProgressBar::new((problems.len() * methods.len()) as u64).with_style(
        ProgressStyle::with_template("{msg:28} [{bar:30}] {pos}/{len} answers, eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let lines = !std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let mut passes = vec![0usize; methods.len()];
    for r in earlier {
        for (n, a) in passes.iter_mut().zip(&r.attempts) {
            *n += usize::from(a.outcome.verdict == Verdict::Passed);
        }
    }
    let mut journal = match journal {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?,
        ),
        None => None,
    };
    let mut records = Vec::with_capacity(problems.len());
    // A problem's prompt is prefilled once for all its seeds.
    let mut last: Option<(&str, mars_engine::Race<'_>)> = None;
    for &(p, seed) in problems {
        let race = match last.take() {
            Some((id, race)) if id == p.task_id => race,
            _ => runner.race(&code::instruction(p))?,
        };
        let mut attempts = Vec::with_capacity(methods.len());
        for (label, method, mode) in methods {
            bar.set_message(format!("{} s{seed} {label}", p.task_id));
            let run = runner.run.with_seed(seed).with_mars(*mode)?;
            let MethodOutput { text, summary, .. } =
                pollster::block_on(race.run(&run, *method, |_| {}))?;
            let code = code::extract(&text, &p.entry_point);
            let program = code::program(p, &code);
            let outcome = sandbox.run(&program)?;
            if check_determinism {
                let again = sandbox.run(&program)?;
                if again.verdict != outcome.verdict {
                    bail!(
                        "{} {label}: the same program gave {:?} then {:?}",
                        p.task_id,
                        outcome.verdict,
                        again.verdict
                    );
                }
            }
            attempts.push(Attempt {
                method: label.clone(),
                text,
                code,
                outcome,
                summary,
            });
            bar.inc(1);
        }
        let record = ProblemRecord {
            task_id: p.task_id.clone(),
            seed,
            prompt_tokens: race.prompt_ids().len(),
            attempts,
        };
        if let Some(file) = journal.as_mut() {
            serde_json::to_writer(&mut *file, &record)?;
            writeln!(file)?;
            file.flush()?;
        }
        if lines {
            for (n, a) in passes.iter_mut().zip(&record.attempts) {
                *n += usize::from(a.outcome.verdict == Verdict::Passed);
            }
            let done = records.len() + 1;
            let elapsed = started.elapsed().as_secs_f64();
            let eta = elapsed / done as f64 * (problems.len() - done) as f64;
            let total = earlier.len() + problems.len();
            let tally: Vec<String> = methods
                .iter()
                .zip(&passes)
                .map(|((label, _, _), n)| format!("{label} {n}"))
                .collect();
            eprintln!(
                "{} seed {seed} ({}/{total}) passed so far: {} · {:.0} min, eta {:.0} min",
                p.task_id,
                earlier.len() + done,
                tally.join(", "),
                elapsed / 60.0,
                eta / 60.0
            );
        }
        records.push(record);
        last = Some((&p.task_id, race));
    }
    bar.finish_and_clear();
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::journal::parse_journal;
    use super::report::file_names;
    use super::*;
    use mars_model::WeightPath;

    fn record(task_id: &str, verdict: Verdict) -> ProblemRecord {
        ProblemRecord {
            task_id: task_id.into(),
            seed: 0,
            prompt_tokens: 7,
            attempts: vec![Attempt {
                method: "strict".into(),
                text: "```python\nx = 1\n```".into(),
                code: "x = 1".into(),
                outcome: Outcome {
                    verdict,
                    seconds: 0.25,
                    stdout: String::new(),
                    stderr: "Traceback".into(),
                    survivors: 0,
                },
                summary: RunSummary::empty(Some("ngram".into())),
            }],
        }
    }

    #[test]
    fn resume_refuses_a_journal_made_on_another_device_path_or_thread_count() {
        let dir = std::env::temp_dir().join(format!("mars-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // As run_eval builds them: the model and the path's settings.
        let settings = |backend: Backend, weights: WeightPath| {
            let mut all = serde_json::Map::new();
            all.insert("model".into(), "m.gguf".into());
            all.extend(path_settings(backend, weights));
            serde_json::Value::Object(all)
        };
        let made = settings(Backend::Cpu, WeightPath::CpuPacked { threads: 2 });
        std::fs::write(dir.join("settings.json"), made.to_string()).unwrap();
        let line = serde_json::to_string(&record("HumanEval/0", Verdict::Passed)).unwrap();
        std::fs::write(dir.join("records.jsonl"), format!("{line}\n")).unwrap();
        // The same settings: the journal's problem is kept.
        assert_eq!(resume(&dir, &made).unwrap().len(), 1);
        for (other, key) in [
            (
                settings(Backend::Cpu, WeightPath::CpuPacked { threads: 4 }),
                "threads",
            ),
            (settings(Backend::Cpu, WeightPath::F32), "matrices"),
            (
                settings(
                    Backend::Wgpu,
                    WeightPath::GpuBlocks {
                        subgroups: None,
                        kv: mars_model::KvType::default(),
                    },
                ),
                "device",
            ),
        ] {
            let err = resume(&dir, &other).unwrap_err().to_string();
            assert!(err.contains(&format!("this run has {key} =")), "{err}");
        }
        // A journal without top-k resumes a run without it, and refuses a run with it.
        let mut no_k = made.clone();
        no_k["top_k"] = serde_json::Value::Null;
        assert_eq!(resume(&dir, &no_k).unwrap().len(), 1);
        let mut with_k = made.clone();
        with_k["top_k"] = 20.into();
        let err = resume(&dir, &with_k).unwrap_err().to_string();
        assert!(err.contains("this run has top_k = 20"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_journal_reads_back_and_a_torn_last_line_is_dropped() {
        let a = record("HumanEval/0", Verdict::Passed);
        let b = record(
            "HumanEval/1",
            Verdict::Failed {
                reason: "AssertionError".into(),
            },
        );
        let line = |r: &ProblemRecord| serde_json::to_string(r).unwrap();
        let whole = format!("{}\n{}\n", line(&a), line(&b));
        let back = parse_journal(&whole).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].task_id, "HumanEval/1");
        assert_eq!(
            back[1].attempts[0].outcome.verdict,
            b.attempts[0].outcome.verdict
        );
        assert_eq!(back[0].attempts[0].summary, a.attempts[0].summary);
        // An interrupted write leaves half a line: dropped.
        let torn = format!("{}\n{}", line(&a), &line(&b)[..40]);
        assert_eq!(parse_journal(&torn).unwrap().len(), 1);
        // A bad line before the last is an error naming it.
        let bad = format!("{}\n{{oops\n{}\n", line(&a), line(&b));
        let err = parse_journal(&bad).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    fn method(label: &str, mode: Option<Mode>, of_strict: f64, speedup: f64) -> MethodReport {
        MethodReport {
            method: label.to_string(),
            mode,
            passed: 0,
            pass_at_1: 0.0,
            pass_at_1_ci: [f64::NAN; 2],
            of_strict,
            of_strict_ci: [f64::NAN; 2],
            speedup,
            won: Vec::new(),
            lost: Vec::new(),
            summary: RunSummary::empty(None),
        }
    }

    fn paper(theta: f32) -> Option<Mode> {
        Some(Mode::resolve(Some(theta), None, DEFAULTS.mars).unwrap())
    }

    /// A problem answered with one seed by one method per verdict (true: passed).
    fn answered(task_id: &str, seed: u64, verdicts: &[bool]) -> ProblemRecord {
        let one = record(task_id, Verdict::Passed);
        let attempts = verdicts
            .iter()
            .map(|&ok| Attempt {
                outcome: Outcome {
                    verdict: if ok {
                        Verdict::Passed
                    } else {
                        Verdict::Failed {
                            reason: "AssertionError".into(),
                        }
                    },
                    ..one.attempts[0].outcome.clone()
                },
                ..one.attempts[0].clone()
            })
            .collect();
        ProblemRecord {
            seed,
            attempts,
            ..one
        }
    }

    /// 40 problems × `seeds`: strict passes 30 problems, the third method 27 of those (90 % of
    /// strict's) and nothing else; the first method (target-only) passes what strict passes.
    fn forty_problems(seeds: u64, copies: usize) -> Vec<ProblemRecord> {
        let mut out = Vec::new();
        for c in 0..copies {
            for p in 0..40 {
                for seed in 0..seeds {
                    let strict = p < 30;
                    let mars = p < 27;
                    out.push(answered(
                        &format!("P/{c}/{p}"),
                        seed,
                        &[strict, strict, mars],
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn intervals_hold_the_estimate_pair_the_methods_and_narrow_with_more_problems() {
        let records = forty_problems(1, 1);
        let ci = report::intervals(3, &records);
        let (pass, of_strict) = ci[2];
        assert!(pass[0] < 0.675 && 0.675 < pass[1], "{pass:?}");
        assert!(of_strict[0] < 0.9 && 0.9 < of_strict[1], "{of_strict:?}");
        // The methods are paired: strict against itself, and target-only that passes exactly
        // what strict passes, are 100 % in every resample, though their pass@1 varies.
        for m in [0, 1] {
            assert_eq!(ci[m].1, [1.0, 1.0], "method {m}");
            assert!(ci[m].0[0] < 0.75 && 0.75 < ci[m].0[1], "{:?}", ci[m].0);
        }
        // Four times the problems: about half the width (1/√4).
        let wide = of_strict[1] - of_strict[0];
        let narrow = report::intervals(3, &forty_problems(1, 4))[2].1;
        let ratio = (narrow[1] - narrow[0]) / wide;
        assert!((0.35..0.7).contains(&ratio), "width ratio {ratio}");
        // A second seed that repeats every verdict adds no information about other problems:
        // the intervals are the bootstrap over problems, not over answers.
        let twice = report::intervals(3, &forty_problems(2, 1));
        assert_eq!(twice[2], ci[2]);
        // Undefined where strict passes nothing.
        let none = vec![answered("P/0", 0, &[false, false, true])];
        assert!(report::intervals(3, &none)[2].1[0].is_nan());
    }

    #[test]
    fn the_report_counts_answers_over_seeds_and_names_them() {
        let methods = [
            ("target-only".to_string(), Method::Target, Mode::Strict),
            ("strict".to_string(), Method::Strict, Mode::Strict),
            ("MARS".to_string(), Method::Mars, DEFAULTS.mars),
        ];
        let records = vec![
            answered("HumanEval/0", 0, &[true, true, false]),
            answered("HumanEval/0", 1, &[true, false, true]),
            answered("HumanEval/1", 0, &[false, true, true]),
            answered("HumanEval/1", 1, &[false, true, true]),
        ];
        let out = report(&methods, &records);
        assert_eq!(out[2].passed, 3);
        assert!((out[2].pass_at_1 - 0.75).abs() < 1e-12);
        assert!((out[2].of_strict - 1.0).abs() < 1e-12);
        assert_eq!(out[2].won, ["HumanEval/0 (seed 1)"]);
        assert_eq!(out[2].lost, ["HumanEval/0 (seed 0)"]);
    }

    #[test]
    fn the_caption_names_files_not_paths() {
        assert_eq!(
            file_names("draft model /a/b/Qwen-0.5B.gguf, ids < 32768"),
            "draft model Qwen-0.5B.gguf, ids < 32768"
        );
        assert_eq!(file_names("ngram"), "ngram");
    }

    #[test]
    fn the_default_is_the_fastest_relaxed_setting_that_keeps_99_percent_of_strict() {
        let methods = [
            method("target-only", None, 1.0, 1.0),
            method("strict", None, 1.0, 1.2),
            method("MARS θ=0.9", paper(0.9), 0.92, 1.4),
            method("MARS θ=0.95", paper(0.95), 0.995, 1.3),
            method("MARS θ=0.98", paper(0.98), 1.0, 1.25),
        ];
        assert_eq!(
            choose_default(&methods).map(|m| m.method.as_str()),
            Some("MARS θ=0.95")
        );
        // Strict and target-only are never candidates, however fast; below the bar, none is.
        let none = [
            method("target-only", None, 1.0, 1.0),
            method("strict", None, 1.0, 9.0),
            method("MARS θ=0.9", paper(0.9), 0.989, 1.4),
        ];
        assert!(choose_default(&none).is_none());
    }
}
