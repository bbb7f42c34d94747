//! Chat templates are sandboxed: runaway loops stop, errors raised by templates surface, and
//! Python string methods that real templates use work.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use mars_formats::{ChatTemplate, FormatError, Message};

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
