package integration

import (
	eventsv1 "k8s.io/api/events/v1"
)

type eventsList struct{ list eventsv1.EventList }

func (e *eventsList) reasons() []string {
	var out []string
	for _, ev := range e.list.Items {
		out = append(out, ev.Reason)
	}
	return out
}

func (e *eventsList) has(reason string) bool {
	for _, r := range e.reasons() {
		if r == reason {
			return true
		}
	}
	return false
}
