//! Chat templates are sandboxed: runaway loops stop, errors raised by templates surface, and
//! Python string methods that real templates use work.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use mars_formats::{ChatTemplate, FormatError, Message, conversation};

#[test]
fn templates_are_bounded_and_errors_are_typed() {
    let endless =
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
    let t = ChatTemplate::new(endless, "", "").unwrap();
    assert!(matches!(
        t.render(&[], false),
        Err(FormatError::Template(_))
    ));

    let raising = "{{ raise_exception('only user and assistant roles') }}";
    let err = ChatTemplate::new(raising, "", "")
        .unwrap()
        .render(&[], false)
        .unwrap_err();
    assert!(
        err.to_string().contains("only user and assistant roles"),
        "{err}"
    );

    assert!(matches!(
        ChatTemplate::new("{% if %}", "", ""),
        Err(FormatError::Template(_))
    ));
    // No loader: a template cannot read files.
    let include = ChatTemplate::new("{% include '/etc/passwd' %}", "", "").unwrap();
    assert!(include.render(&[], false).is_err());
}

#[test]
fn python_string_methods_work() {
    let source = "{{ bos_token }}{% for m in messages %}{{ m.role.upper() }}: {{ m.content.strip() }}\n{% endfor %}";
    let t = ChatTemplate::new(source, "<s>", "</s>").unwrap();
    let text = t.render(&[Message::new("user", "  hi  ")], false).unwrap();
    assert_eq!(text, "<s>USER: hi\n");
}

#[test]
fn conversations_read_openais_message_shape() {
    let bare = r#"[{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "name": "bot"},
        {"role": "user", "content": [{"type": "text", "text": "Two"}, {"type": "text", "text": "parts"}]}]"#;
    let messages = conversation(bare).unwrap();
    assert_eq!(
        messages,
        [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
            Message::new("assistant", "Hello."),
            Message::new("user", "Two\nparts"),
        ]
    );
    // A chat-completion request body: its `messages`, other fields ignored.
    let body = format!(r#"{{"model": "x", "temperature": 0, "messages": {bare}}}"#);
    assert_eq!(conversation(&body).unwrap(), messages);
}

#[test]
fn malformed_conversations_name_the_field() {
    let cases: [(&str, &str); 10] = [
        ("{", "messages: not JSON"),
        ("3", "messages: expected a list of messages"),
        (r#"{"model": "x"}"#, "messages: expected a list of messages"),
        ("[]", "messages: empty"),
        (r#"[{"content": "x"}]"#, "messages[0].role: missing"),
        (
            r#"[{"role": "tool", "content": "x"}]"#,
            r#"messages[0].role: expected one of ["system", "user", "assistant"], got "tool""#,
        ),
        (r#"[{"role": "user"}]"#, "messages[0].content: missing"),
        (
            r#"[{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]"#,
            "messages[1].role: a system message may only come first",
        ),
        (
            r#"[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]"#,
            r#"messages[1].role: the last message must be the user's, got "assistant""#,
        ),
        (
            r#"[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]"#,
            r#"messages[0].content[0].type: only text parts are supported, got Some("image_url")"#,
        ),
    ];
    for (json, message) in cases {
        let err = conversation(json).unwrap_err();
        assert!(
            matches!(err, FormatError::Conversation { .. }),
            "{json}: {err:?}"
        );
        assert!(err.to_string().starts_with(message), "{json}: {err}");
    }
}
