// The console's live list: each request as it ends, from the server-sent
// events of /console/events, put at the top of the table. Text only
// (textContent): nothing a request carries becomes markup.
(function () {
	"use strict";
	var rows = document.getElementById("rows");
	var live = document.getElementById("live");
	if (!rows || !window.EventSource) {
		return;
	}
	var max = 200;
	var es = new EventSource("/console/events");
	es.onopen = function () { live.textContent = "live"; live.className = "live on"; };
	es.onerror = function () { live.textContent = "reconnecting"; live.className = "live"; };
	es.addEventListener("request", function (ev) {
		var r = JSON.parse(ev.data);
		var tr = document.createElement("tr");
		var d = r.decision;
		tr.className = (d === "deny" || d === "error" || d === "warn") ? d : "allow";
		var cells = [r.time, r.sandbox, r.route, null, d === "warn" ? "warned" : d, String(r.status)];
		cells.forEach(function (text, i) {
			var td = document.createElement("td");
			if (i === 3) {
				var code = document.createElement("code");
				code.textContent = r.method + " " + r.target;
				td.appendChild(code);
				if (r.reason) {
					var why = document.createElement("div");
					why.className = "reason";
					why.textContent = r.reason;
					td.appendChild(why);
				}
			} else {
				td.textContent = text;
			}
			tr.appendChild(td);
		});
		rows.insertBefore(tr, rows.firstChild);
		while (rows.children.length > max) {
			rows.removeChild(rows.lastChild);
		}
	});
})();
