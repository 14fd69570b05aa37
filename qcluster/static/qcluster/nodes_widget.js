// Refreshes the admin's nodes-by-role table in place every data-refresh-seconds.
(function () {
  "use strict";
  const widget = document.getElementById("qcluster-nodes-widget");
  if (!widget) return;
  const url = widget.dataset.url;
  const every = Math.max(1, Number(widget.dataset.refreshSeconds) || 15) * 1000;

  function cell(tag, text) {
    const el = document.createElement(tag);
    el.textContent = String(text);
    return el;
  }

  function render(data) {
    const body = widget.querySelector("tbody");
    const rows = data.roles.map(function (role) {
      const tr = document.createElement("tr");
      tr.dataset.role = role.role;
      tr.appendChild(cell("th", role.role)).setAttribute("scope", "row");
      data.statuses.forEach(function (status) {
        tr.appendChild(cell("td", role.counts[status] || 0)).dataset.status = status;
      });
      tr.appendChild(cell("td", role.total));
      return tr;
    });
    body.replaceChildren.apply(body, rows);
    widget.dataset.refreshedAt = new Date().toISOString();
  }

  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(render)
      .catch(function () { widget.dataset.refreshFailed = new Date().toISOString(); })
      .finally(function () { setTimeout(refresh, every); });
  }
  setTimeout(refresh, every);
})();
