//! Scripted schedules: the findings of earlier rounds, each as the steps that showed it.
