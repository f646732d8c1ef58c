// Live refresh: every data-live seconds, fetch this page's main content and
// put it in place, unless the operator is typing in a form. Without
// JavaScript the page is the same, and its Reload link refreshes it.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var every = main && parseInt(main.getAttribute("data-live"), 10);
  if (!every) { return; }
  function busy() {
    var a = document.activeElement;
    if (a && a.form && main.contains(a)) { return true; }
    var inputs = main.querySelectorAll("input[name=reason]");
    for (var i = 0; i < inputs.length; i++) { if (inputs[i].value) { return true; } }
    return false;
  }
  setInterval(function () {
    if (document.hidden || busy()) { return; }
    fetch(location.href, { headers: { "X-Dashboard-Partial": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) { main.innerHTML = html; } })
      .catch(function () {});
  }, every * 1000);
})();
