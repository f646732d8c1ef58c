// Live refresh: every data-live milliseconds, fetch this page's main content and
// put it in place, unless the operator is using a form. Without
// JavaScript the page is the same, and its Reload link refreshes it.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var every = main && parseInt(main.getAttribute("data-live"), 10);
  if (!every) { return; }
  // Never swap the page under an operator at work: typing, pointing at a
  // form, with the keyboard focus in it, or with anything filled in.
  function busy() {
    if (main.querySelector("form:hover")) { return true; }
    var a = document.activeElement;
    // Keyboard focus inside the content (a link, a button) stays put.
    if (a && a !== document.body && main.contains(a)) { return true; }
    var inputs = main.querySelectorAll("input");
    for (var i = 0; i < inputs.length; i++) {
      var x = inputs[i];
      if (x.type === "checkbox" ? x.checked !== x.defaultChecked : x.value !== x.defaultValue) { return true; }
    }
    return false;
  }
  setInterval(function () {
    if (document.hidden || busy()) { return; }
    fetch(location.href, { headers: { "X-Dashboard-Partial": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      // The operator may have started on a form while this was on its way.
      .then(function (html) { if (html !== null && !busy()) { main.innerHTML = html; } })
      .catch(function () {});
  }, Math.max(every, 50));
})();
