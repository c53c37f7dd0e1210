// Waitline console: the one script. Live progress of a redrive (polls its JSON every second).
"use strict";
(function () {
  const box = document.querySelector("[data-progress]");
  if (!box) { return; }
  const url = box.getAttribute("data-progress") + "?format=json";
  const show = (id, value) => {
    const el = document.getElementById(id);
    if (el) { el.textContent = String(value); }  // text, never markup
  };
  const poll = () => {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => r.json())
      .then((data) => {
        const live = data.live || data.audit;
        show("state", live.state);
        show("sent", live.sent);
        show("detail", live.detail || "");
        if (live.state === "running" || live.state === "paused") {
          setTimeout(poll, 1000);
        } else {
          document.querySelectorAll("form.inline button").forEach((b) => {
            if (b.id !== "") { b.disabled = true; }
          });
        }
      })
      .catch(() => setTimeout(poll, 3000));
  };
  setTimeout(poll, 500);
})();
